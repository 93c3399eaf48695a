#!/bin/sh
# Installs a cutout .deb on a fresh Debian 12 in a chroot (debootstrap,
# minbase; no container runtime needed), then, against the installed files:
# `cutout --version`, the packaged configuration, and the API served by the
# service user, with an account and a key made by the installed CLI; an
# upgrade over it and a purge. With PREVIOUS_DEB (CI sets it: the package its
# last passing run built, kept in its build cache), that package is
# installed and used first, and this one installed over it, as an operator
# upgrades.
# Usage (as root): packaging/test-install.sh target/debian/cutout_*.deb photo.jpg
set -eu
deb=$(realpath "$1")
photo=$(realpath "$2")
root=$(mktemp -d /tmp/cutout-chroot.XXXXXX)
chmod 755 "$root"   # the service user must reach / inside it
pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    umount "$root/proc" 2>/dev/null || true
    rm -rf "$root"
}
trap cleanup EXIT

# BASE_TREE (CI sets it, in its build cache): a tar of the fresh tree,
# made by the first run and unpacked by the next ones for a week.
base=${BASE_TREE:-}
if [ -n "$base" ] && [ -n "$(find "$base" -mtime -7 2>/dev/null)" ]; then
    echo "unpacking the debootstrapped tree $base into $root"
    tar -xf "$base" -C "$root"
else
    echo "debootstrap bookworm (minbase) into $root"
    debootstrap --variant=minbase bookworm "$root" >"$root.log" 2>&1 || { cat "$root.log"; exit 1; }
    rm -f "$root.log"
    if [ -n "$base" ]; then
        tar -cf "$base.part" -C "$root" . && mv "$base.part" "$base"
    fi
fi
mount -t proc proc "$root/proc"
cp "$deb" "$root/tmp/cutout.deb"
previous=${PREVIOUS_DEB:-}
if [ -n "$previous" ] && [ -f "$previous" ]; then
    echo "first the previous package: $previous ($(dpkg-deb -f "$previous" Version))"
    cp "$previous" "$root/tmp/cutout-previous.deb"
    chroot "$root" apt-get install -y -qq /tmp/cutout-previous.deb
else
    previous=""
    chroot "$root" apt-get install -y -qq /tmp/cutout.deb
fi

# Over an installed package, as unattended-upgrades does: an operator's edit
# of cutout.toml is kept when the packaged one changed too (at a terminal,
# dpkg asks; here there is no one to ask, and dpkg fails on the prompt).
upgrade_to() {
    chroot "$root" apt-get install -y -qq \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}
as_cutout() { chroot --userspec=cutout:cutout "$root" "$@"; }
cli() { as_cutout cutout --config /etc/cutout/cutout.toml "$@"; }
used() { cli usage booth | awk '{print $3}'; }
chroot "$root" cutout --version
test "$(chroot "$root" stat -c %U /var/lib/cutout)" = cutout
chroot "$root" test -f /lib/systemd/system/cutout.service
chroot "$root" test -L /etc/systemd/system/multi-user.target.wants/cutout.service

# Below the ephemeral ports (32768 up), as other tests run beside this one.
port=$((20000 + $$ % 12000))
as_cutout cutout --config /etc/cutout/cutout.toml account create booth --plan pro
key=$(as_cutout cutout --config /etc/cutout/cutout.toml key create booth | tail -n 1)
tls_port=$((port + 1))
# Serves one photo with ENGINE from the installed files, then stops.
cut_out_with() {
    CUTOUT_LISTEN=127.0.0.1:$port CUTOUT_TLS_LISTEN=127.0.0.1:$tls_port \
        CUTOUT_MODEL=u2netp CUTOUT_ENGINE=$1 CUTOUT_MDNS_ENABLED=false \
        chroot --userspec=cutout:cutout "$root" cutout --config /etc/cutout/cutout.toml serve &
    pid=$!
    i=0
    until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
        i=$((i + 1)); [ $i -lt 300 ] || { echo "the installed server ($1) never became ready"; exit 1; }
        sleep 0.2
    done
    rm -f "$root/tmp/cutout.png"
    curl -sf -H "X-Api-Key: $key" -F "image_file=@$photo" \
        "http://127.0.0.1:$port/api/remove-bg" -o "$root/tmp/cutout.png"
    head -c 8 "$root/tmp/cutout.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a"
    # HTTPS with the certificate the service user made on first start; the
    # dashboard over plain HTTP is sent there.
    curl -sfk "https://127.0.0.1:$tls_port/readyz" >/dev/null
    test "$(curl -s -o /dev/null -w '%{http_code} %{redirect_url}' "http://127.0.0.1:$port/login")" \
        = "307 https://127.0.0.1:$tls_port/login"
    kill "$pid"
    wait "$pid" || true
    pid=""
}
cut_out_with tract
if [ -n "$previous" ]; then
    # This package over the previous one, which served and holds an account,
    # a key, a count, its certificate and an operator's edit of cutout.toml.
    # The same version number too: --reinstall, so that apt unpacks it.
    fingerprint=$(cli tls fingerprint)
    echo "# edited on the previous version" >> "$root/etc/cutout/cutout.toml"
    edited=$(sha256sum < "$root/etc/cutout/cutout.toml")
    before=$(used)
    upgrade_to --reinstall /tmp/cutout.deb
    dpkg-deb --fsys-tarfile "$deb" | tar -xOf - ./usr/bin/cutout | cmp - "$root/usr/bin/cutout"
    test "$(sha256sum < "$root/etc/cutout/cutout.toml")" = "$edited"
    test "$(cli tls fingerprint)" = "$fingerprint"
    test "$(used)" = "$before"
    cut_out_with tract
    test "$(used)" = $((before + 1))
fi
as_cutout cutout --config /etc/cutout/cutout.toml tls fingerprint | grep -Eq '^([0-9A-F]{2}:){31}[0-9A-F]{2}$'
# The packaged ONNX Runtime library: found, its sha256 checked, loaded.
cut_out_with onnxruntime
# An operator's `cutout bench`: the installed models on both engines, its
# advice, and the report the Status page shows.
as_cutout cutout --config /etc/cutout/cutout.toml bench --seconds 20 > "$root/tmp/bench.txt"
grep -q "^u2netp on onnxruntime: .* s per 12 MP photo, peak .* MiB" "$root/tmp/bench.txt"
grep -q "^recommended for this board" "$root/tmp/bench.txt"
test "$(chroot "$root" stat -c %U /var/lib/cutout/bench.json)" = cutout

# An upgrade: the same files relabelled as a newer version, so that dpkg
# takes its upgrade path (the maintainer scripts, the conffile, the state
# directory left alone). The operator's edit of cutout.toml, the accounts,
# keys, counts and certificate stay, and the key from before cuts out.
# (tests/api/upgrade.rs migrates a database of every earlier schema.)
fingerprint=$(cli tls fingerprint)
echo "# edited by the operator" >> "$root/etc/cutout/cutout.toml"
edited=$(sha256sum < "$root/etc/cutout/cutout.toml")
before=$(used)
dpkg-deb -R "$deb" "$root/tmp/next"
sed -i 's/^Version: .*/&+next/' "$root/tmp/next/DEBIAN/control"
dpkg-deb -b -Znone "$root/tmp/next" "$root/tmp/cutout-next.deb" >/dev/null
rm -rf "$root/tmp/next"
upgrade_to /tmp/cutout-next.deb
test "$(chroot "$root" dpkg-query -W -f '${Version}' cutout)" = "$(dpkg-deb -f "$deb" Version)+next"
test "$(sha256sum < "$root/etc/cutout/cutout.toml")" = "$edited"
test "$(cli tls fingerprint)" = "$fingerprint"
test "$(used)" = "$before"
cut_out_with tract
test "$(used)" = $((before + 1))

# A purge removes the state directory (the HTTPS private key among it),
# /etc/cutout and the service user: installed again, it is a new appliance.
chroot "$root" apt-get purge -y -qq cutout
for left in /var/lib/cutout /etc/cutout; do
    if [ -e "$root$left" ]; then echo "purge left $left"; exit 1; fi
done
if chroot "$root" getent passwd cutout || chroot "$root" getent group cutout; then
    echo "purge left the cutout user or group"; exit 1
fi
chroot "$root" apt-get install -y -qq /tmp/cutout.deb
test "$(cli account list | wc -l)" = 1
echo "installed package${previous:+ (over the previous one)}: --version, configuration, service user, HTTPS and API on both engines, bench, an upgrade that keeps the data and the edited configuration, and a purge all work"
