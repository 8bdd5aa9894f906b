package main

import "github.com/spf13/cobra"

// newDaemonCmd is `ccload daemon`: see package daemon.
func newDaemonCmd(a *app) *cobra.Command {
	return &cobra.Command{Use: "daemon", Short: "Hold this host to a config (under construction)", Hidden: true}
}

// newResetCmd is `ccload reset`.
func newResetCmd(a *app) *cobra.Command {
	return &cobra.Command{Use: "reset", Short: "Remove everything ccload owns (under construction)", Hidden: true}
}
