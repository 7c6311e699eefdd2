-- Argo CD health check for polsched.io/SchedulingPolicy (kstatus conditions, see
-- operator/polsched/controller/policies/conditions.py). Install it in argocd-cm:
--   resource.customizations.health.polsched.io_SchedulingPolicy: |
--     <this file>
-- Healthy: Ready=True for the current generation. Degraded: Stalled=True for it (the
-- spec does not load, or its schedulerName belongs to an older policy). Progressing:
-- anything else, e.g. the operator has not seen the current generation yet (every
-- condition carries the generation it describes).
local hs = {}
local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end

local function current(c)
  if c == nil then
    return false
  end
  if generation == nil or c.observedGeneration == nil then
    return true
  end
  return c.observedGeneration >= generation
end

local conditions = {}
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    conditions[c.type] = c
  end
end
local ready = conditions["Ready"]
local stalled = conditions["Stalled"]

if current(stalled) and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message
  return hs
end
if current(ready) and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
  return hs
end
hs.status = "Progressing"
if current(ready) and ready.message ~= nil and ready.message ~= "" then
  hs.message = ready.message
elseif generation ~= nil then
  hs.message = "Waiting for the polsched operator to run generation " .. tostring(generation)
else
  hs.message = "Waiting for the polsched operator"
end
return hs
