package l7proxy

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a socket with raw system calls, waiting on Go's
// poller only when the socket would block. Go's own socket calls enter
// and leave the scheduler's syscall state; on this VM a write through
// the datapath takes tens of microseconds, long enough for the runtime's
// monitor to hand the goroutine's P to another thread and to keep
// waking itself up every 20 µs: a quarter of the proxy's CPU in `perf`
// before (issue 36). The calls here are non-blocking and short.
type rawIO struct {
	rc syscall.RawConn
	// writeFailed: a write failed (timed out: the peer did not read).
	writeFailed bool
}

// socketIO returns what reads and writes c: its rawIO, or c itself when
// it is no socket.
func socketIO(c net.Conn) io.ReadWriter {
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			return &rawIO{rc: rc}
		}
	}
	return c
}

func (r *rawIO) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			r1, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			n, errno = int(r1), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *rawIO) Write(b []byte) (int, error) {
	written := 0
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for written < len(b) {
			r1, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&b[written])), uintptr(len(b)-written),
				syscall.MSG_NOSIGNAL, 0, 0)
			switch e {
			case 0:
				written += int(r1)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		r.writeFailed = true
		return written, err
	case errno != 0:
		r.writeFailed = true
		return written, &net.OpError{Op: "write", Net: "tcp", Err: errno}
	}
	return written, nil
}

// closeSocket closes a connection, its FIN sent first by a raw
// shutdown(2): sending it runs the datapath, long enough for Go's
// close(2) to hand the P away (rawIO); what close does then is short.
func closeSocket(c net.Conn, rw io.ReadWriter) error {
	if r, ok := rw.(*rawIO); ok && !r.writeFailed {
		_ = r.rc.Control(func(fd uintptr) {
			syscall.RawSyscall(syscall.SYS_SHUTDOWN, fd, syscall.SHUT_WR, 0)
		})
	}
	return c.Close()
}
