# tokenflow's image for machines that can pull base images (scripts/build-image makes the same
# image without pulling anything). Build: docker build -t tokenflow .   (or podman build)
# Run:   docker run -p 8080:8080 -v /path/to/models:/models:ro tokenflow \
#          serve --model /models/model --host 0.0.0.0 --port 8080
FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential g++ cmake ninja-build pkg-config git \
      libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev \
      libpcre2-dev libsentencepiece-dev libicu-dev libboost-dev \
      libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc libssl-dev \
      libhdf5-dev libleveldb-dev libgtest-dev libgmock-dev libbenchmark-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake --preset release -DTOKENFLOW_BUILD_TESTS=OFF -DTOKENFLOW_BUILD_BENCH=OFF && cmake --build --preset release --target tokenflow tf_spm_shim

FROM debian:bookworm-slim
# The runtime libraries tokenflow and its SentencePiece shim link (tests/deploy/test_image.py
# checks this list against the binary's NEEDED entries).
RUN apt-get update && apt-get install -y --no-install-recommends \
      libfmt9 libspdlog1.10 libpcre2-8-0 libsentencepiece0 libicu72 libprotobuf32 \
      libgrpc++1.51 libgrpc29 libabsl20220623 libssl3 libhdf5-103-1 libleveldb1d libstdc++6 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd -g 10001 tokenflow && useradd -u 10001 -g 10001 -d /var/lib/tokenflow -m -s /usr/sbin/nologin tokenflow \
    && mkdir -p /models
COPY --from=build /src/build/release/tokenflow /src/build/release/libtf_spm_shim.so /usr/local/bin/
USER 10001
WORKDIR /var/lib/tokenflow
VOLUME /models
EXPOSE 8080 8500
ENTRYPOINT ["/usr/local/bin/tokenflow"]
CMD ["serve", "--model", "/models/model", "--host", "0.0.0.0", "--port", "8080"]
