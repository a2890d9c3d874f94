# syntax=docker/dockerfile:1
# Tandem's image: one static binary (the Rust toolchain's musl target, which
# links everything in) on distroless's static base, which has no libc and no
# shell, and runs as nonroot (65532, the user the manifests expect).
#
#   docker build -t registry.example.com/platform/tandem:0.1.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
#
# The base images are pinned by digest, with their tags beside them for
# the reader; the digest decides what is pulled. To move to a newer base,
# change tag and digest together (Renovate and Dependabot update both).

ARG RUST_IMAGE=docker.io/library/rust:1.95-alpine
ARG RUST_DIGEST=sha256:606fd313a0f49743ee2a7bd49a0914bab7deedb12791f3a846a34a4711db7ed2
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot
ARG RUNTIME_DIGEST=sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639

# The toolchain, with cargo-chef, which turns the manifest and lock file
# into a recipe for building the dependencies alone.
FROM ${RUST_IMAGE}@${RUST_DIGEST} AS chef
# musl-dev: the C runtime that ring and mimalloc compile against;
# binutils: readelf, for the static check below.
RUN apk add --no-cache musl-dev binutils
RUN cargo install cargo-chef --locked --version 0.1.78
WORKDIR /src

# The recipe: Cargo.toml and Cargo.lock with every target a stub. It changes
# only when the dependencies do.
FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
# The dependency layer: built from the recipe alone, so a change to Tandem's
# own code reuses it and compiles only the tandem crate.
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --release --locked --recipe-path recipe.json --bin tandem
# The whole context (minus .dockerignore) so that every target Cargo.toml
# declares (benches, tests) exists when Cargo parses the manifest.
COPY . .
RUN cargo build --release --locked --bin tandem \
    && cp target/release/tandem /tandem
# Static, or the build fails: a binary that needs a shared library would not
# start on the static base.
RUN readelf -d /tandem > /tmp/dynamic \
    && if grep -q '(NEEDED)' /tmp/dynamic; then \
         echo "tandem links shared libraries:" >&2; grep '(NEEDED)' /tmp/dynamic >&2; exit 1; \
       fi

FROM ${RUNTIME_IMAGE}@${RUNTIME_DIGEST}
ARG RUNTIME_IMAGE
ARG RUNTIME_DIGEST
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="tandem" \
      org.opencontainers.image.description="Kubernetes add-on that deploys and scales LLM inference services made of roles" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${RUNTIME_IMAGE}" \
      org.opencontainers.image.base.digest="${RUNTIME_DIGEST}"
COPY --from=builder /tandem /usr/local/bin/tandem
USER 65532:65532
# 10250: admission webhooks (HTTPS; --listen); 8080: probes and metrics (HTTP).
EXPOSE 10250 8080
ENTRYPOINT ["/usr/local/bin/tandem"]
CMD ["serve"]
