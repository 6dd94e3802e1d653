# Sourced by the device-call scripts beside it: the carried wheels (.wt/whl) installed, the GPU named,
# and `new` / `old` running a module in this tree or in the copy of the commit before (.wt/old).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .wt/whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name --format=csv,noheader
here=$PWD
new() { (cd "$here" && python3 -m "$@"); }
old() { (cd "$here/.wt/old" && python3 -m "$@"); }
