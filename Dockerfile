# The polsched image: `polsched run` (the operator) and `polsched scheduler` (a Dedicated
# policy's scheduler). Build: docker build -t ghcr.io/polsched/polsched:0.1.0 .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    POLSCHED_TEMPLATES=/opt/polsched/manifests/templates

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY crds ./crds
# The symlink operator/polsched/crds -> ../../crds resolves inside the build context, so
# the wheel carries the CRD; the Dedicated templates are read from POLSCHED_TEMPLATES.
RUN pip install . && rm -rf /src
COPY manifests /opt/polsched/manifests

# Non-root, with a fixed uid so the Deployment's runAsNonRoot can check it.
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin polsched
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["polsched"]
CMD ["run"]
