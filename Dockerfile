# Container image for Tandem: builds the `tandem` binary with the Rust toolchain,
# then copies it into a distroless, non-root runtime image.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# The whole context (minus .dockerignore) so that every target Cargo.toml
# declares (benches, tests, examples) exists when Cargo parses the manifest.
COPY . .
RUN cargo build --release --locked --bin tandem

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /src/target/release/tandem /usr/local/bin/tandem
USER 65532:65532
# 10250: admission webhooks (HTTPS; --listen); 8080: probes and metrics (HTTP).
EXPOSE 10250 8080
ENTRYPOINT ["/usr/local/bin/tandem"]
CMD ["serve"]
