#!/bin/sh
# .ci/install, as `make test` runs it first: as root with everything there
# it says nothing and changes nothing; as another user it names in one line
# what is missing and the command that installs it, and installs nothing.
# "Missing" here: chromium and qemu-aarch64-static left out of the user's
# PATH (the other commands it looks for are linked into it, the system's:
# nobody cannot run root's own, such as a pyenv shim).
# Needs root (it runs the script as `nobody`).
set -eu
[ "$(id -u)" = 0 ] || { echo "tests/ci-install.sh needs root: it runs .ci/install as root and as nobody" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"

out=$(.ci/install 2>&1) || { echo "as root, .ci/install failed:"; echo "$out"; exit 1; }
[ -z "$out" ] || { echo "as root with everything installed, .ci/install said:"; echo "$out"; exit 1; }

mkdir "$dir/bin"
for command in bash make npm cc systemd-analyze file curl debootstrap python3 dpkg dpkg-query grep id; do
  ln -s "$(env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin sh -c 'command -v "$1"' - "$command")" "$dir/bin/"
done
cp .ci/install "$dir/"
status=0
setpriv --reuid=nobody --regid=nogroup --clear-groups \
  env -i PATH="$dir/bin" HOME=/nonexistent bash "$dir/install" >"$dir/stdout" 2>"$dir/stderr" || status=$?
# One line, naming at least what was left out (this machine's own lacks,
# such as python3-venv for the system's python3, may join them).
line=$(cat "$dir/stderr")
names() { case " ${line#make test needs }" in *"$1"*) ;; *) return 1 ;; esac; }
if [ "$status" != 1 ] || [ -s "$dir/stdout" ] || [ "$(wc -l < "$dir/stderr")" != 1 ] ||
  [ "${line#make test needs }" = "$line" ] || ! names " chromium " ||
  ! names " qemu-user-static (10, bookworm-backports): install them with \`sudo .ci/install\`"; then
  echo "as nobody, without chromium and qemu: status $status, expected 1, nothing on stdout, and one line"
  echo "on stderr naming chromium and qemu-user-static and \`sudo .ci/install\`"
  echo "stdout:"; cat "$dir/stdout"; echo "stderr:"; cat "$dir/stderr"
  exit 1
fi
echo ".ci/install: quiet as root with everything there; as nobody, names what is missing and installs nothing"
