package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cnlab/cnlab/internal/plural"
)

// streamLimit is --count and --duration of a command that follows a
// stream (monitor, observe --follow): it stops after count items or when
// duration is up, and with both, fewer than count items when time is up
// is a failure, so a script can tell "they came" from "time ran out";
// Ctrl-C is no failure.
type streamLimit struct {
	count    int
	duration time.Duration
	what     string // the items, singular: "event", "flow"
	seen     int
}

var (
	errTimeUp     = errors.New("--duration is up")
	errStreamDone = errors.New("done")
)

// context bounds ctx by the duration.
func (l *streamLimit) context(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.duration > 0 {
		return context.WithTimeoutCause(ctx, l.duration, errTimeUp)
	}
	return context.WithCancel(ctx)
}

// saw counts one item: errStreamDone once count are seen.
func (l *streamLimit) saw() error {
	l.seen++
	if l.count > 0 && l.seen >= l.count {
		return errStreamDone
	}
	return nil
}

// end is the command's result once the stream returned err under ctx.
func (l *streamLimit) end(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, errStreamDone):
		return nil
	case err != nil && ctx.Err() == nil:
		return err
	case l.count > 0 && l.seen < l.count && errors.Is(context.Cause(ctx), errTimeUp):
		return fmt.Errorf("%d of %s within %v", l.seen, plural.N(l.count, l.what), l.duration)
	}
	return nil
}
