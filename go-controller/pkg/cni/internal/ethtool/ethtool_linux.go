// Package ethtool switches NIC offloads through the kernel's ethtool ioctl
// (SIOCETHTOOL), as `ethtool -K <if> tx off` does, without running ethtool.
//
// The calls act on the interfaces of the calling thread's network namespace: call them
// from inside ns.NetNS.Do (which locks the thread) to reach a pod's interfaces.
package ethtool

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolValue is struct ethtool_value (linux/ethtool.h): a command and a 32-bit value.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqData is struct ifreq with its union holding a pointer (ifr_data). The pointer
// stays an unsafe.Pointer so the garbage collector keeps what it points to alive.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte // at least the rest of the union (24 bytes on 64-bit)
}

// SetTxChecksum turns TX checksum offload of ifName on or off (ETHTOOL_STXCSUM). The
// kernel also drops the offloads that depend on it (TSO, SCTP CRC).
func SetTxChecksum(ifName string, on bool) error {
	v := ethtoolValue{cmd: unix.ETHTOOL_STXCSUM}
	if on {
		v.data = 1
	}
	if err := ioctl(ifName, &v); err != nil {
		return fmt.Errorf("set tx checksum offload of %s: %w", ifName, err)
	}
	return nil
}

// TxChecksum reports whether TX checksum offload of ifName is on (ETHTOOL_GTXCSUM).
func TxChecksum(ifName string) (bool, error) {
	v := ethtoolValue{cmd: unix.ETHTOOL_GTXCSUM}
	if err := ioctl(ifName, &v); err != nil {
		return false, fmt.Errorf("get tx checksum offload of %s: %w", ifName, err)
	}
	return v.data != 0, nil
}

// ioctl runs one SIOCETHTOOL request for ifName on a socket of the current namespace.
func ioctl(ifName string, v *ethtoolValue) error {
	if len(ifName) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q is too long", ifName)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open ethtool socket: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	req := ifreqData{data: unsafe.Pointer(v)}
	copy(req.name[:], ifName)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
	if errno != 0 {
		return errno
	}
	return nil
}
