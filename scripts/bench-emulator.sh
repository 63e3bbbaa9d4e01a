#!/usr/bin/env bash
# Emulator throughput, with RabbitMQ's AMQP 1.0 plugin as the anchor when RabbitMQ is on this
# machine: raw go-amqp against both, then the azservicebus SDK against the emulator.
# Usage: scripts/bench-emulator.sh [-count N]
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v rabbitmq-plugins >/dev/null 2>&1 && rabbitmq-plugins enable rabbitmq_amqp1_0 >/dev/null 2>&1; then
  export SEQBUS_BENCH_RABBITMQ_URL=${SEQBUS_BENCH_RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672}
else
  echo "RabbitMQ not available: the rabbitmq anchor will be skipped" >&2
fi
go test -run '^$' -bench 'GoAMQP|SendReceiveComplete' -benchtime 20000x "$@" ./emulator/
