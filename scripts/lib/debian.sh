# Sourced by scripts/*-deps.sh: installs the named Debian packages that are not
# installed yet. Usage: install_missing_debian_packages LABEL PACKAGE...
install_missing_debian_packages() {
  local label="$1"
  shift
  local missing=()
  local p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "$label: missing Debian packages: ${missing[*]}; run this as root or install them with apt-get" >&2
    return 1
  fi
  echo "$label: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The postgresql package would create and start a system cluster; berth's
  # tests start their own in a temporary directory, so none is made.
  if printf '%s\n' "${missing[@]}" | grep -qx postgresql && [ ! -e /etc/postgresql-common/createcluster.conf ]; then
    mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
