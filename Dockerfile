# spillguard: an OpenAI-compatible proxy that stops tool calls written out as text.
#
#   docker build -t spillguard .
#   docker run --rm -p 8080:8080 -e SPILLGUARD_UPSTREAM=deepseek spillguard
#
# Configuration is only through SPILLGUARD_* variables (see deploy/README.md). PORT, when a
# platform sets it, wins over SPILLGUARD_PORT. Give `docker stop` more time than
# SPILLGUARD_GRACEFUL_TIMEOUT (default 30 s): `docker stop -t 40`, or compose's stop_grace_period.

# ---- builder: install the dependencies, then spillguard itself, into a venv -------------------
FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# Extra CA certificates, for building behind a TLS-inspecting proxy: put PEM files named *.crt in
# deploy/ca-certificates/ (none by default; git ignores them). Only this stage trusts them.
COPY deploy/ca-certificates/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null \
 && python -m venv /opt/venv
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
WORKDIR /src
# The package's extras installed beside its dependencies, comma-separated. By default `otel`, so
# that SPILLGUARD_OTEL_TRACES=true turns traces on without another image (they stay off until
# then); `--build-arg EXTRAS=` builds without it.
ARG EXTRAS=otel
# Dependencies first, from pyproject.toml alone, so a code change does not reinstall them. An
# extra pyproject.toml does not name fails the build.
COPY pyproject.toml README.md ./
RUN python -c "import os, tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; extras = [e for e in os.environ['EXTRAS'].split(',') if e]; print('\n'.join(p['dependencies'] + [d for e in extras for d in p['optional-dependencies'][e]]))" > /tmp/requirements.txt \
 && /opt/venv/bin/pip install -r /tmp/requirements.txt
COPY app ./app
RUN /opt/venv/bin/pip install --no-deps . \
 && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
 && /opt/venv/bin/pip uninstall -y -q pip setuptools \
 && /opt/venv/bin/python -c "import spillguard.cli, uvloop, httptools" \
 && case ",$EXTRAS," in *,otel,*) /opt/venv/bin/python -c "import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http.trace_exporter" ;; esac

# ---- runtime: the venv, a non-root user and a writable data directory --------------------------
FROM python:3.11-slim
RUN groupadd --system --gid 10001 spillguard \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/spillguard \
      --no-create-home --shell /usr/sbin/nologin spillguard \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/spillguard
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SPILLGUARD_HOST=0.0.0.0 \
    SPILLGUARD_PORT=8080 \
    SPILLGUARD_LOG_FORMAT=json \
    SPILLGUARD_INCIDENTS_DB=/var/lib/spillguard/incidents.sqlite3
WORKDIR /var/lib/spillguard
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=15s --timeout=4s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('PORT') or os.environ.get('SPILLGUARD_PORT') or '8080'; urllib.request.urlopen('http://127.0.0.1:' + port + '/healthz', timeout=3)"]
# sh only maps a platform's PORT onto SPILLGUARD_PORT, then `exec`s: spillguard becomes PID 1 and
# receives SIGTERM itself. Arguments after the image name go to spillguard (e.g. `--mode fail`).
ENTRYPOINT ["/bin/sh", "-c", "export SPILLGUARD_PORT=\"${PORT:-${SPILLGUARD_PORT:-8080}}\"; exec spillguard \"$@\"", "spillguard"]
CMD []
