package lab

import "context"

// TEMPORARY until internal/nflog lands (helper nflog).
func (r *recorder) netfilter(ctx context.Context, run func(string, func(context.Context, func()) error) <-chan struct{}) []<-chan struct{} {
	return nil
}
func (r *recorder) services(ctx context.Context, run func(string, func(context.Context, func()) error) <-chan struct{}) []<-chan struct{} {
	return nil
}
