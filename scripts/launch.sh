#!/usr/bin/env bash
# Launch `python -m recast train` under accelerate with one of configs/accelerate/*.yaml.
#
#   scripts/launch.sh single_gpu --preset sd35 --world sd3:/models/sd3.5-medium
#   scripts/launch.sh ddp_8gpu   --preset sd35 --world sd3:/models/sd3.5-medium
#   ACCELERATE_ARGS="--num_processes 4" scripts/launch.sh ddp_8gpu ...   # override any accelerate option
#
# Everything after the config name goes to `recast train` unchanged.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
configs="$here/configs/accelerate"
name="${1:-}"
if [[ -z "$name" || ! -f "$configs/$name.yaml" ]]; then
    echo "usage: scripts/launch.sh CONFIG [recast train args...]; CONFIG is one of:" \
         "$(cd "$configs" && ls *.yaml | sed 's/\.yaml$//' | tr '\n' ' ')(got '${name}')" >&2
    exit 2
fi
shift
# shellcheck disable=SC2086  # ACCELERATE_ARGS is a list of options on purpose
exec "${ACCELERATE:-accelerate}" launch --config_file "$configs/$name.yaml" ${ACCELERATE_ARGS:-} -m recast train "$@"
