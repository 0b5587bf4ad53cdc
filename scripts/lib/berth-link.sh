# Sourced by scripts/ensure-deps.sh: puts `berth` on the PATH as a link to this
# checkout's bin/berth.js, which runs the TypeScript sources through tsx, so no
# build step is needed. A berth that is not this checkout's (the npm package,
# another clone) is left alone. Usage: link_berth_command [BIN_DIR]
# (default /usr/local/bin; run from the repository root).
link_berth_command() {
  local dir="${1:-/usr/local/bin}"
  local target link
  target="$(pwd)/bin/berth.js"
  link="$dir/berth"
  if [ "$(readlink "$link" 2>/dev/null)" = "$target" ]; then
    return 0
  fi
  if [ -e "$link" ] || [ -L "$link" ]; then
    echo "berth: $link is another berth ($(readlink -f "$link" 2>/dev/null || echo "$link")); leaving it. This checkout's is $target"
    return 0
  fi
  if [ -d "$dir" ] && [ -w "$dir" ]; then
    ln -s "$target" "$link"
    echo "berth: linked $link -> $target"
  else
    echo "berth: cannot write $dir; to run berth from the shell: ln -s $target ~/.local/bin/berth (or any directory on PATH)"
  fi
}
