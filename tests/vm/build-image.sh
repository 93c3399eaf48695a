#!/bin/sh
# Builds the Debian 12 (bookworm) amd64 disk image `make test-vm` boots in
# qemu: a real systemd as PID 1, which the chroot of packaging/test-install.sh
# cannot give (hardening lines, Type=notify, restarts, reboots, power cuts).
#
# Usage (as root): tests/vm/build-image.sh
# In:  VM_CACHE (default target/vm): the image lives in $VM_CACHE/image and
#      is reused for a week, and as long as this script is unchanged (its
#      sha256 is kept beside the image); VM_MIRROR, a Debian mirror URL for
#      debootstrap (default: debootstrap's own).
# Out: $VM_CACHE/image/disk.raw (ext4, 8 GiB sparse, about 1 GiB used),
#      $VM_CACHE/image/vmlinuz and initrd.img (booted with -kernel/-initrd,
#      so the image needs no boot loader).
# Needs: debootstrap, e2fsprogs (mkfs.ext4 -d); about 5 minutes when made.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${VM_CACHE:-target/vm}
image=$cache/image
stamp=$(sha256sum "$here/build-image.sh" | cut -d' ' -f1)

if [ -f "$image/stamp" ] && [ "$(cat "$image/stamp")" = "$stamp" ] &&
    [ -n "$(find "$image/disk.raw" -mtime -7 2>/dev/null)" ]; then
    echo "VM image $image/disk.raw: reused (made $(date -r "$image/disk.raw" '+%F %R'))"
    exit 0
fi

mkdir -p "$cache"
tree=$(mktemp -d "$cache/rootfs.XXXXXX")
trap 'rm -rf "$tree"' EXIT
chmod 755 "$tree"

# The default variant (not minbase): it has what the package depends on
# (adduser, libstdc++6, libgcc-s1) and apt, as the guest reaches no mirror.
# linux-image-amd64 brings the kernel and initramfs-tools; python3 is for
# the database's integrity check (its sqlite3 module; no sqlite3 CLI, which
# an appliance would not have either); curl for /readyz from inside.
echo "debootstrap bookworm into $tree (log: $cache/debootstrap.log)"
debootstrap --arch=amd64 \
    --include=systemd,systemd-sysv,udev,dbus,linux-image-amd64,python3,curl,procps,kmod,iproute2 \
    bookworm "$tree" ${VM_MIRROR:-} >"$cache/debootstrap.log" 2>&1 ||
    { tail -n 40 "$cache/debootstrap.log"; exit 1; }

echo cutout-vm >"$tree/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tcutout-vm\n' >"$tree/etc/hosts"
# The root disk; the 9p share is how the .deb goes in and no network is needed.
cat >"$tree/etc/fstab" <<'FSTAB'
/dev/vda   /          ext4  errors=remount-ro                              0 1
xfer       /mnt/xfer  9p    trans=virtio,version=9p2000.L,msize=262144,nofail  0 0
FSTAB
mkdir -p "$tree/mnt/xfer"
printf '9p\n9pnet_virtio\n' >"$tree/etc/modules-load.d/9p.conf"

# DHCP on qemu's user network, for the forwarded API port.
mkdir -p "$tree/etc/systemd/network"
printf '[Match]\nName=en* eth*\n\n[Network]\nDHCP=ipv4\n' >"$tree/etc/systemd/network/20-wired.network"
chroot "$tree" systemctl enable systemd-networkd.service >/dev/null 2>&1

# A root shell on the serial console, which the test drives.
mkdir -p "$tree/etc/systemd/system/serial-getty@ttyS0.service.d"
cat >"$tree/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf" <<'UNIT'
[Service]
ExecStart=
ExecStart=-/sbin/agetty --autologin root --noclear --keep-baud 115200 %I dumb
UNIT
# The journal kept on disk: after a power cut, the boot before it can be read.
mkdir -p "$tree/var/log/journal"
# Nothing to wait for on a network nobody else is on.
chroot "$tree" systemctl mask apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer >/dev/null 2>&1 || true

mkdir -p "$image"
cp -L "$tree/vmlinuz" "$image/vmlinuz"
cp -L "$tree/initrd.img" "$image/initrd.img"
rm -f "$image/disk.raw" "$image/stamp"
mkfs.ext4 -q -F -L cutout-vm -d "$tree" "$image/disk.raw.part" 8G
mv "$image/disk.raw.part" "$image/disk.raw"
echo "$stamp" >"$image/stamp"
echo "VM image $image/disk.raw: made ($(du -h "$image/disk.raw" | cut -f1) used; kernel $(ls "$tree/boot" | grep vmlinuz))"
