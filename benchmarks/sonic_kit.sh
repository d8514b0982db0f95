#!/usr/bin/env bash
# The kit that puts sonic-moe (models/sonic.py's kernels) on the GPU machine, which reaches no registry: the wheels
# from PyPI and the kernel's Python source, in .carry_sonic/ (ignored), split over two device calls because the
# CuTe DSL runtime alone is 88 MB as a wheel (nvidia-cutlass-dsl-libs-cu13) and a call carries 64 MiB with the tree.
#
#   bash benchmarks/sonic_kit.sh            # here, with the registry (~15 minutes on 2 cores: xz of 223 MB)
#
# Makes .carry_sonic/part1/ (34 MiB of the runtime, re-packed as tar.xz: PART1_MIB) and .carry_sonic/part2/ (the
# rest, the small wheels, sonic_moe.tar.xz, ~20 MiB); each holds install.sh. On the GPU machine, two calls less than 30 s
# apart (files outside the tree outlive a call only that long):
#
#   call 1, carry .carry_sonic/part1:  bash .carry_sonic/part1/install.sh
#   call 2, carry .carry_sonic/part2:  bash .carry_sonic/part2/install.sh && \
#       PYTHONPATH=src:/tmp/site python3 benchmarks/gpu_sonic_check.py --out $OUT/sonic_check.json
#   (or carry .carry and .carry_sonic/part2, and source .carry/setup.sh before install.sh, to train after it)
#
# install.sh stages its part in /tmp/sonic_parts; once both are there it checks the sums, installs the wheels with
# pip --target /tmp/site, unpacks the runtime and sonic_moe/ there, and imports cutlass and tvm_ffi (models/sonic.py
# puts nvidia-cutlass-dsl's dsl_packages on sys.path itself: its .pth is not read from a PYTHONPATH folder).
#
# Versions (docs/benchmarks.md, issue 60): the kernel is kernels-community/sonic-moe as transformers 5.17's backend
# loads it (its Hub revision ep-support; sonic-moe 0.1.2.post1, QuACK 0.6.1 vendored), taken from a local snapshot of
# the public huggingface/kernels-community repository (KC_REPO: a git directory, as the search tool's fetch leaves it;
# KC_REV: its commit). Its vendored QuACK pins nvidia-cutlass-dsl 4.6.0 and kernel-builder built it on 4.6.1;
# transformers' loader wants >= 4.6.0 and apache-tvm-ffi >= 0.1.10. cu13 only: the loader picks the flavor whose
# runtime is installed, and the machine's driver (580) runs CUDA 13. Not carried, already on the machine: torch,
# triton, numpy, cuda-bindings (cuda-python's module), einops. Not needed: nvidia-cuda-nvdisasm (SASS dumps only),
# torch-c-dlpack-ext (torch >= 2.10 exports the DLPack exchange API itself), the libs-cu12 flavor, quack-kernels
# (vendored).
set -euo pipefail
cd "$(dirname "$0")/.."

CUTLASS=${CUTLASS:-4.6.1}
TVM_FFI=${TVM_FFI:-0.1.15.post2}
KC_REPO=${KC_REPO:-/work/.mirror/huggingface+kernels-community/repo}
KC_REV=${KC_REV:-40d4194f48b6775c4be4776ed08035fabb0e758f}
XZ_OPTS=${XZ_OPTS:---x86 --lzma2=preset=9e,dict=256MiB,nice=273 -T1}
KIT=.carry_sonic
WORK=${WORK:-/tmp/sonic_kit_work}

rm -rf "$KIT" && mkdir -p "$KIT/part1" "$KIT/part2" "$WORK/wheels"
pip_get() {
    pip download --no-deps --python-version 3.12 --platform manylinux_2_28_x86_64 --only-binary=:all: \
        -d "$WORK/wheels" -q "$@"
}
pip_get "nvidia-cutlass-dsl==$CUTLASS" "nvidia-cutlass-dsl-libs-base==$CUTLASS" \
    "nvidia-cutlass-dsl-libs-core==$CUTLASS" "nvidia-cutlass-dsl-libs-cu13==$CUTLASS" "apache-tvm-ffi==$TVM_FFI"
for w in nvidia_cutlass_dsl-"$CUTLASS"-py3 nvidia_cutlass_dsl_libs_base-"$CUTLASS"- \
    nvidia_cutlass_dsl_libs_core-"$CUTLASS"-py3 apache_tvm_ffi-"$TVM_FFI"-cp312; do
    cp "$WORK"/wheels/"$w"*.whl "$KIT/part2/"
done

# The runtime wheel re-packed: xz with the x86 branch filter and one 256 MiB window over its unpacked files is 47 MiB,
# against 84 MiB as the wheel's zip (58 MiB with plain xz -9e). Unpacked into the --target folder it is the same
# install pip makes (no scripts, no .data). Python's tarfile reads it (liblzma decodes the filter chain).
cu13=$(ls "$WORK"/wheels/nvidia_cutlass_dsl_libs_cu13-*.whl)
if [ ! -s "$WORK/cu13.tar.xz" ] || [ "$WORK/cu13.tar.xz" -ot "$cu13" ]; then
    rm -rf "$WORK/cu13" && mkdir -p "$WORK/cu13" && (cd "$WORK/cu13" && python3 -m zipfile -e "$cu13" .)
    tar -C "$WORK/cu13" -cf - . | xz $XZ_OPTS > "$WORK/cu13.tar.xz.tmp" && mv "$WORK/cu13.tar.xz.tmp" "$WORK/cu13.tar.xz"
fi
# sonic-moe's source as the kernel repository keeps it (torch-ext/sonic_moe), unchanged: kernel-builder's generated
# _ops.py is the one file it lacks, and models/sonic.py supplies that module at import.
git --git-dir="$KC_REPO" archive --format=tar "$KC_REV:sonic-moe/torch-ext" sonic_moe | xz -9 > "$KIT/part2/sonic_moe.tar.xz"

# The cut: PART1_MIB of the runtime in part1 (call 1 needs nothing else: no .carry), the rest in part2 with the
# small wheels and the source, so that call 2 can also carry .carry (tree + .carry ~30 MiB) under the 64 MiB.
size=$(stat -c %s "$WORK/cu13.tar.xz")
half=$(( ${PART1_MIB:-34} * 1024 * 1024 ))
[ "$half" -lt "$size" ] || { echo "PART1_MIB=${PART1_MIB:-34} holds the whole runtime ($size bytes)" >&2; exit 1; }
head -c "$half" "$WORK/cu13.tar.xz" > "$KIT/part1/cu13.tar.xz.part1"
tail -c +"$(( half + 1 ))" "$WORK/cu13.tar.xz" > "$KIT/part2/cu13.tar.xz.part2"
sha256sum "$WORK/cu13.tar.xz" | awk '{print $1"  cu13.tar.xz"}' > "$KIT/part2/SHA256SUMS"
echo "sonic_moe from huggingface/kernels-community $KC_REV" > "$KIT/part2/SOURCES"
ls "$WORK"/wheels | sed 's/^/wheel: /' >> "$KIT/part2/SOURCES"

cat > "$KIT/install.sh" <<'EOF'
#!/usr/bin/env bash
# On the GPU machine: stage this call's part; with both parts staged, install everything into /tmp/site.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SITE=${SITE:-/tmp/site}
STAGE=/tmp/sonic_parts
mkdir -p "$STAGE" "$SITE"
cp "$here"/* "$STAGE"/
if [ ! -f "$STAGE/cu13.tar.xz.part1" ] || [ ! -f "$STAGE/cu13.tar.xz.part2" ]; then
    echo "sonic kit: staged $(ls "$STAGE" | tr '\n' ' ')in $STAGE; run the other part's install.sh next (within 30 s)"
    # part2 is the last step: without part1 staged (a machine started afresh) nothing after it can run
    [ ! -f "$here/SHA256SUMS" ] || { echo "sonic kit: part1 is not staged: run call 1 again, then call 2" >&2; exit 3; }
    exit 0
fi
cd "$STAGE"
cat cu13.tar.xz.part1 cu13.tar.xz.part2 > cu13.tar.xz
sha256sum -c SHA256SUMS
python3 -m pip install --no-index --no-deps --target "$SITE" -q ./*.whl
python3 - "$SITE" <<'PY'
import sys, tarfile
site = sys.argv[1]
for name in ("cu13.tar.xz", "sonic_moe.tar.xz"):
    with tarfile.open(name) as tar:
        tar.extractall(site, filter="data")
PY
PYTHONPATH="$SITE/nvidia_cutlass_dsl/dsl_packages:$SITE${PYTHONPATH:+:$PYTHONPATH}" python3 -c "
import cutlass, cutlass.cute, tvm_ffi, importlib.metadata as md
print('sonic kit: installed in $SITE: nvidia-cutlass-dsl', md.version('nvidia-cutlass-dsl-libs-base'),
      'apache-tvm-ffi', md.version('apache-tvm-ffi'))"
EOF
chmod +x "$KIT/install.sh"
cp "$KIT/install.sh" "$KIT/part1/" && mv "$KIT/install.sh" "$KIT/part2/"
du -b "$KIT/part1" "$KIT/part2" | awk '{printf "%s: %.1f MiB\n", $2, $1 / 2^20}'
ls -l "$KIT"/part1 "$KIT"/part2
