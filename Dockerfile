# nodeexec's one image (the agent of the nsenter/runtime backends and resident
# agents, and the NodeScript watcher's controller): the static binary, and
# nodeexec-spool beside it (the small program the debugpod backend runs in the
# user's image), and nothing else. `nodeexec image push REGISTRY/REPOSITORY[:TAG]` builds the same
# image from the running binary without Docker (internal/agentimage; a unit
# test keeps the final stage below equal to it: path, entrypoint, user, env).
#   docker build -t REGISTRY/nodeexec:0.1.0 . && docker push REGISTRY/nodeexec:0.1.0
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags '-s -w' -o /out/nodeexec ./cmd/nodeexec && \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags '-s -w' -o /out/nodeexec-spool ./cmd/nodeexec-spool

FROM scratch
COPY --from=build /out/nodeexec /usr/local/bin/nodeexec
COPY --from=build /out/nodeexec-spool /usr/local/bin/nodeexec-spool
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["/usr/local/bin/nodeexec"]
