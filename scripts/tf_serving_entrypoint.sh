#!/usr/bin/env bash
# The entry point of the tensorflow/serving image, for an image of tokenflow: manifests written
# for tensorflow/serving set MODEL_NAME (and MODEL_BASE_PATH) and pass TF Serving's flags as
# arguments; the same container spec runs tokenflow with only the image name changed. Flags given
# in the arguments win over the ones here (the last value of a flag is taken, as TF Serving).
set -euo pipefail
MODEL_NAME="${MODEL_NAME:-model}"
MODEL_BASE_PATH="${MODEL_BASE_PATH:-/models}"
exec tensorflow_model_server --port=8500 --rest_api_port=8501 \
  --model_name="${MODEL_NAME}" --model_base_path="${MODEL_BASE_PATH}/${MODEL_NAME}" "$@"
