package main

import (
	"context"
	"fmt"
	"log"

	"github.com/cvsm/cvsm/clients/go/cvsm"
)

func main() {
	ctx := context.Background()
	// The token, the API URL and the team come from CVSM_TOKEN, CVSM_BASE_URL and CVSM_TEAM.
	client, err := cvsm.NewClient(cvsm.Options{})
	if err != nil {
		log.Fatal(err) // cvsm: CVSM_TOKEN is not set: ...
	}

	dsn, err := client.Get(ctx, "DATABASE_URL") // one secret of the "production" environment
	if err != nil {
		log.Fatal(err)
	}
	all, err := client.GetAll(ctx) // map[string]string of every secret
	if err != nil {
		log.Fatal(err)
	}
	names, err := client.Inject(ctx) // into the process environment, keeping variables already set
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("DATABASE_URL has %d bytes; %d secrets; injected %v\n", len(dsn), len(all), names)
}
