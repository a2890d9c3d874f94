// Command etcd runs a single-member etcd from the upstream module's embed
// package, for the tests' control plane only: data in -data-dir, clients on
// -listen (plain HTTP on loopback), no peers. It exits when the server stops
// or on SIGTERM/SIGINT.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	listen := flag.String("listen", "http://127.0.0.1:2379", "client URL to serve")
	peer := flag.String("peer", "http://127.0.0.1:2380", "peer URL (one member, never dialled)")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("-data-dir is required")
	}
	client, err := url.Parse(*listen)
	if err != nil {
		log.Fatalf("-listen: %v", err)
	}
	peerURL, err := url.Parse(*peer)
	if err != nil {
		log.Fatalf("-peer: %v", err)
	}

	cfg := embed.NewConfig()
	cfg.Dir = *dataDir
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	// The tests' data is thrown away: no fsync per write.
	cfg.UnsafeNoFsync = true

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("start etcd: %v", err)
	}
	defer server.Close()
	<-server.Server.ReadyNotify()
	log.Printf("etcd ready on %s", client)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-server.Err():
		log.Fatalf("etcd: %v", err)
	case <-signals:
	}
}
