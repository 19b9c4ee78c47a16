package cvsm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/cvsm/cvsm/clients/go/cvsm"
)

// The token and base URL come from CVSM_TOKEN and CVSM_BASE_URL here.
func Example() {
	ctx := context.Background()
	client, err := cvsm.NewClient(cvsm.Options{Team: "acme"})
	if err != nil {
		log.Fatal(err) // e.g. "cvsm: CVSM_TOKEN is not set: ..."
	}
	dsn, err := client.Get(ctx, "DATABASE_URL")
	if err != nil {
		log.Fatal(err)
	}
	_ = dsn
}

func ExampleClient_Get_errors() {
	client, err := cvsm.NewClient(cvsm.Options{Team: "acme", CacheTTL: cvsm.NoCache, MaxRetries: cvsm.Int(0)})
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.Get(context.Background(), "DATABASE_URL")
	var cerr *cvsm.Error
	switch {
	case errors.Is(err, cvsm.ErrNotFound):
		fmt.Println("not there:", err)
	case errors.As(err, &cerr) && cerr.Kind == cvsm.KindRateLimited && cerr.HasRetryAfter:
		time.Sleep(cerr.RetryAfter)
	case errors.As(err, &cerr) && cerr.RequestID != "":
		log.Fatalf("%v (request id %s)", err, cerr.RequestID)
	case err != nil:
		log.Fatal(err)
	}
}

func ExampleClient_Inject() {
	client, err := cvsm.NewClient(cvsm.Options{Team: "acme", Environment: "staging"})
	if err != nil {
		log.Fatal(err)
	}
	names, err := client.Inject(context.Background(), cvsm.Overwrite(true))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("set", names)
}

// With StaleIfError, an outage or a 429 answers the kept value; GetWithInfo
// says so.
func ExampleClient_GetWithInfo() {
	client, err := cvsm.NewClient(cvsm.Options{Team: "acme", StaleIfError: 10 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	dsn, info, err := client.GetWithInfo(context.Background(), "DATABASE_URL")
	if err != nil {
		log.Fatal(err)
	}
	if info.Stale {
		var cerr *cvsm.Error
		errors.As(info.Err, &cerr)
		log.Printf("DATABASE_URL is %s old: the refresh failed (%s)", info.Age, cerr.Kind)
	}
	_ = dsn
}
