#!/bin/busybox sh
# /init of the vmtests initramfs. Sets up the mounts the tests expect,
# loads the modules, runs each test binary and prints machine-readable
# markers (CCLOAD-VMTEST ...) on the serial console, then powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mkdir -p /run /var && mount -t tmpfs run /run && ln -s /run /var/run
mount -t bpf bpf /sys/fs/bpf
mkdir -p /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
echo "CCLOAD-VMTEST booted $(uname -r)"

while read -r m; do
	[ -n "$m" ] || continue
	insmod "/modules/$m" || echo "CCLOAD-VMTEST insmod-failed $m"
done < /modules/order

echo "CCLOAD-VMTEST status-begin"
/bin/ccload status --json
echo "CCLOAD-VMTEST status-end"
echo "CCLOAD-VMTEST available $(cat /proc/sys/net/ipv4/tcp_available_congestion_control)"

export CCLOAD_NO_SKIP=1 CCLOAD_IN_VM=1 HOME=/tmp
# vmtests --bench: one `ccload bench` run instead of the tests; its --out
# directory comes back over the console as a base64 tar.gz.
if [ -s /etc/bench-args ]; then
	echo "CCLOAD-VMTEST bench-begin"
	/bin/ccload bench $(cat /etc/bench-args) --out /tmp/bench 2>&1
	echo "CCLOAD-VMTEST bench-end exit=$?"
	echo "CCLOAD-VMTEST bench-archive-begin"
	[ -d /tmp/bench ] && tar czf - -C /tmp bench | base64
	echo "CCLOAD-VMTEST bench-archive-end"
fi
while IFS='|' read -r pkg regex; do
	[ -n "$pkg" ] || continue
	echo "CCLOAD-VMTEST begin $pkg"
	"/tests/$pkg.test" -test.v -test.count=1 -test.timeout=20m -test.run "$regex" 2>&1
	echo "CCLOAD-VMTEST end $pkg exit=$?"
done < /tests/manifest
echo "CCLOAD-VMTEST done"
poweroff -f
