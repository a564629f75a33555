package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
)

// errInterrupted ends archrun with status 130 and no message, as a shell
// ends a program Ctrl-C stopped.
var errInterrupted = errors.New("interrupted")

// interrupts handles Ctrl-C (SIGINT): the first one cancels the work under
// way (a turn: loading, the prompt, generating), which stops at the next
// prompt chunk or token; a second one, or one while no work is under way,
// ends the process at once with status 130.
type interrupts struct {
	ch     chan os.Signal
	mu     sync.Mutex
	cancel context.CancelFunc // of the turn under way, nil between turns
	exit   func(int)
}

func newInterrupts() *interrupts {
	i := &interrupts{ch: make(chan os.Signal, 2), exit: os.Exit}
	signal.Notify(i.ch, os.Interrupt)
	go func() {
		for range i.ch {
			i.mu.Lock()
			cancel := i.cancel
			i.cancel = nil
			i.mu.Unlock()
			if cancel == nil {
				i.exit(130)
				continue
			}
			cancel()
		}
	}()
	return i
}

// stop restores the default handling of SIGINT.
func (i *interrupts) stop() {
	signal.Stop(i.ch)
	close(i.ch)
}

// turn is the context of one piece of work; done ends it.
func (i *interrupts) turn() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	i.mu.Lock()
	i.cancel = cancel
	i.mu.Unlock()
	return ctx, func() {
		i.mu.Lock()
		i.cancel = nil
		i.mu.Unlock()
		cancel()
	}
}
