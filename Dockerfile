# Builds the seqbus binaries into one small static image (distroless, non-root): the worker, the
# topology tool and the Service Bus emulator. docker-compose.yml and deploy/kubernetes use it.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/worker ./cmd/worker \
 && CGO_ENABLED=0 go build -trimpath -o /out/topology ./cmd/topology \
 && CGO_ENABLED=0 go build -trimpath -o /out/emulator ./cmd/emulator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /out/topology /out/emulator /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/worker"]
