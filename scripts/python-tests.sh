#!/usr/bin/env bash
# Runs the Python client's tests (clients/python) against a real
# `kvfence serve` that they build from this repository. Needs Go, and
# python3-venv, python3-cbor2 and python3-pytest (Debian/Ubuntu packages;
# or pip install cbor2 pytest into the interpreter named by KVFENCE_PYTHON),
# and python3-mypy to type-check the package.
# The virtual environment is made under .ci-local/ (or $KVFENCE_VENV) with
# the system's site packages, and the client is installed into it
# editable, without the network.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${KVFENCE_PYTHON:-/usr/bin/python3}
venv=${KVFENCE_VENV:-.ci-local/python-venv}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation --no-index -e clients/python
cd clients/python
# The package promises types (py.typed): mypy --strict holds it to them
# (configuration in pyproject.toml), when mypy is installed.
if "../../$venv/bin/python" -c 'import mypy' 2>/dev/null; then
  "../../$venv/bin/python" -m mypy src/kvfence
fi
exec "../../$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
