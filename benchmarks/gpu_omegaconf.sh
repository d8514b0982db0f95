# Sourced by the GPU runbooks after .carry/setup.sh, which installs the carried wheels once per machine: a kit
# repacked with OmegaConf's wheel (benchmarks/pack_extra.sh) after a machine's first call still needs it installed.
python3 -c "import omegaconf" 2>/dev/null \
  || python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/wheels/omegaconf-*.whl \
  || { echo "no OmegaConf on this machine: run benchmarks/pack_extra.sh after pack.sh" >&2; return 2; }
