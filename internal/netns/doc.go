// Package netns is the one place in cnlab that creates, enters and deletes
// network namespaces. Every namespace switch happens on a goroutine locked to
// its OS thread; a thread whose namespace cannot be restored is thrown away,
// never reused. Prefer Handle (a netlink handle bound to a namespace) over Do
// where netlink is enough. Other packages run a program in a namespace
// through Run (wait for it, get its output or an error carrying its stderr)
// or Start (a process that runs on). This package must never touch the root
// network namespace's links, routes or sysctls.
package netns
