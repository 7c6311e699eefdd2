# The polsched image, for people with Docker: the same thing `make image` builds without
# it (hack/image.sh): Debian bookworm's Python 3.11 (no openssl command), the dependencies
# locked with hashes in hack/image/requirements.txt and the polsched wheel under
# /opt/polsched/lib, user 10001, nothing writable but /tmp, `polsched run` by default.
# Build: docker build -t ghcr.io/polsched/polsched:0.1.0 .
FROM debian:bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY crds ./crds
COPY hack/image ./hack/image
# The symlink operator/polsched/crds -> ../../crds resolves inside the build context, so
# the wheel carries the CRD; the Dedicated templates are read from POLSCHED_TEMPLATES.
RUN python3 -m venv /venv \
    && /venv/bin/pip wheel -q --no-deps -w /wheel . \
    && /venv/bin/pip install -q --no-compile --no-deps --require-hashes --only-binary=:all: \
         --target /opt/polsched/lib -r hack/image/requirements.txt \
    && /venv/bin/pip install -q --no-compile --no-deps --upgrade --target /opt/polsched/lib /wheel/*.whl \
    && rm -rf /opt/polsched/lib/bin /opt/polsched/lib/kubernetes/aio \
    && find /opt/polsched/lib -depth -type d \( -name tests -o -name test \) -exec rm -rf {} + \
    && python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/polsched/lib

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-minimal libpython3.11-stdlib \
         ca-certificates libstdc++6 \
    && rm -rf /var/lib/apt/lists/* /var/cache/* /var/log/* /usr/bin/openssl /usr/bin/c_rehash \
    && echo 'polsched:x:10001:10001:polsched:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'polsched:x:10001:' >> /etc/group \
    && find / -xdev -type d -perm -0002 ! -path /tmp -exec chmod o-w {} + \
    && chmod 1777 /tmp
COPY --from=build /opt/polsched /opt/polsched
COPY manifests/templates /opt/polsched/manifests/templates
COPY hack/image/polsched /usr/local/bin/polsched
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    POLSCHED_TEMPLATES=/opt/polsched/manifests/templates
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["/usr/local/bin/polsched"]
CMD ["run"]
