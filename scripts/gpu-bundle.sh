#!/usr/bin/env bash
# Build the Python packages a GPU machine without registry access lacks into ./.gpu-bundle/ of the
# checkout, small enough to copy there with it. Run where pip can download (or has /opt/wheels).
#
#   bash scripts/gpu-bundle.sh [extra-pkg==ver ...]
#
# Then copy the checkout (with .gpu-bundle/) to the GPU machine and run, from its root:
#   bash .gpu-bundle/install.sh && export PYTHONPATH=/tmp/site:$PWD
#
# FlashInfer's wheel is ~62 MB; its kernel sources for unrelated ops (MoE, KDA, GDN,
# sampling, ...) are dropped and the rest is xz-packed (~14 MB). Attention JIT still works.
set -euo pipefail
FLASHINFER="${FLASHINFER:-flashinfer-python==0.7.2.post1}"
# attnplan's core dependencies a CUDA+torch image (Python 3.12) typically lacks; add more as arguments.
PKGS=(
  "apache-tvm-ffi==0.1.15.post2"
  "pydantic==2.14.3" "pydantic-core==2.50.4" "annotated-types" "typing-inspection" "typing-extensions"
  "pynvml==13.0.1"
  "fastapi==0.163.2" "starlette" "annotated-doc" "opentelemetry-api" "uvicorn==0.54.0"
  "$@"
)
top=$(git rev-parse --show-toplevel)
out="$top/.gpu-bundle"
grep -qxF "/.gpu-bundle/" "$top/.git/info/exclude" 2>/dev/null || echo "/.gpu-bundle/" >> "$top/.git/info/exclude"
rm -rf "$out" && mkdir -p "$out/wheels"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform any)
for p in "${PKGS[@]}"; do
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$out/wheels" "$p"
done
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps -d "$tmp" "$FLASHINFER"
(cd "$tmp" && python3 -m zipfile -e ./*.whl site >/dev/null)
rm -rf "$tmp"/site/flashinfer/data/csrc/{cake_*,kda,gdn,fused_moe,blackwell_*,alphamoe*,experimental}
tar -C "$tmp/site" -cf - . | xz -T0 -6 > "$out/flashinfer.tar.xz"
rm -rf "$tmp"
cat > "$out/install.sh" <<'EOF'
#!/usr/bin/env bash
# Run on the GPU machine from the checkout root: installs the bundle into /tmp/site.
set -e
here=$(cd "$(dirname "$0")" && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$here"/wheels/*.whl
tar -xJf "$here/flashinfer.tar.xz" -C /tmp/site
echo "bundle installed in /tmp/site: export PYTHONPATH=/tmp/site:\$PWD"
EOF
chmod +x "$out/install.sh"
du -sh "$out"
