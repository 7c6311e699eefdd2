"""The validating admission webhook for SchedulingPolicy: the loader's validation at
`kubectl apply` time, so an invalid policy is refused with its field paths instead of
being accepted and then reported as Valid=False.

kopf (@kopf.on.validate) answers the AdmissionReviews; the configuration is ours, not
kopf's (kopf would also insist on a MutatingWebhookConfiguration, which the operator's
RBAC rightly cannot create, and exit after its retries). Two ways to serve it:

- In-cluster (`--webhook-service NAMESPACE/NAME`, what manifests/ ship): the apiserver
  calls the Service. The configuration is manifests/' own (failurePolicy Fail: a policy
  is never admitted unchecked), so it outlives any one replica and leaves with `kubectl
  delete -k`; kopf does not manage it (it would empty it whenever a replica stops). The
  operator keeps its own CA in one Secret (`--webhook-ca-secret`: the CA key, which only
  the operator reads) and its serving certificate in another (`--webhook-secret`), both
  shared by every replica behind the Service; it injects the CA into the configuration's
  caBundle once it serves, renews both before they expire and makes again whatever in
  them is invalid (CertificateManager, as open-policy-agent/cert-controller's rotator).
  Both Secrets and the configuration are watched by name: a broken Secret is made good,
  and a re-created or edited configuration gets its caBundle back, at once.
- In-cluster with certificates it did not make (`--webhook-certificates external`, the
  chart's cert-manager mode): the serving certificate and key are read from
  `--webhook-secret` as cert-manager's Certificate writes them, reloaded when the Secret
  changes, and never made, renewed or written; cert-manager's CA injector, not the
  operator, fills the caBundle (ExternalCertificates).
- Local (`--webhook-listen` alone, for `polsched run` on a laptop and the e2e tests):
  the configuration `polsched.io` points at https://HOST:PORT with a CA made in memory
  (or kept in `--webhook-secret`), failurePolicy Ignore, and its webhook is removed
  when the process stops, so a stopped process does not slow or block later edits.

The modules, one job each: admission.py (the check and kopf's handler), certificates.py
(the PKI: make, inspect, renew), rotator.py (where the certificates are kept: two Secrets,
or memory), configuration.py (the ValidatingWebhookConfiguration), server.py (the HTTPS
server kopf runs, and the flags that place it) and watch.py (one named object, watched).
What it must not do: schedule, or write a policy's status (controller.policies does).
"""
