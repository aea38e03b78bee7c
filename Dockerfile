# The image the scheduled-backup CronJob runs: slim Python, statusvault installed, non-root, no shell tools needed
# beyond /bin/sh (the CronJob chains `backup && prune`).
#   docker build -t registry.example.com/statusvault:0.2.0 .
# tests/unit/test_package.py builds the wheel from exactly what the build stage copies, and holds the user to the
# one the rendered pods run as.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY statusvault ./statusvault
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN groupadd --gid 65532 statusvault && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp statusvault
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
ENV HOME=/tmp PYTHONUNBUFFERED=1
ENTRYPOINT ["statusvault"]
CMD ["--help"]
