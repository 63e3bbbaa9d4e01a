package topology_test

import (
	"context"
	"fmt"
	"os"

	"github.com/seqbus/seqbus/topology"
	"github.com/seqbus/seqbus/topology/topologytest"
)

func ExampleLoad() {
	file := `
sequenced:
  - name: github
    sources: [webhooks]
    sessionId:
      strategy: fallback
      alternatives:
        - {strategy: entity}
        - {strategy: repository}
`
	ns, warnings, err := topology.Load("github.yaml", []byte(file))
	if err != nil {
		panic(err)
	}
	for _, r := range ns.Topic("webhooks").Subscription("github-fwd").Rules {
		fmt.Printf("%s\n  filter: %s\n  action: %s\n", r.Name, r.Filter.SQL, r.Action)
	}
	fmt.Println(warnings[0].Msg)
	// Output:
	// sessionid-1
	//   filter: EXISTS(user.Owner) AND EXISTS(user.Repo) AND EXISTS(user.EntityType) AND EXISTS(user.EntityId)
	//   action: SET sys.SessionId = user.Owner + '/' + user.Repo + '/' + user.EntityType + '/' + user.EntityId
	// sessionid-2
	//   filter: EXISTS(user.Owner) AND EXISTS(user.Repo) AND NOT (EXISTS(user.Owner) AND EXISTS(user.Repo) AND EXISTS(user.EntityType) AND EXISTS(user.EntityId))
	//   action: SET sys.SessionId = user.Owner + '/' + user.Repo + '/repository'
	// the session id length is unbounded (Owner, Repo, EntityType, EntityId): declare maxLength for every property so that it is checked against the limit of 128 characters
}

func ExampleDiff() {
	ctx := context.Background()
	live := topologytest.NewFake() // topology/sbadmin.New(client) for a real namespace
	want, _, err := topology.Load("q.yaml", []byte("queues: [{name: jobs, lockDuration: PT30S}]\n"))
	if err != nil {
		panic(err)
	}
	for range 2 {
		ns, err := topology.Fetch(ctx, live, want)
		if err != nil {
			panic(err)
		}
		plan := topology.Diff(want, ns)
		_ = plan.Write(os.Stdout)
		if _, err := topology.Apply(ctx, live, plan, nil); err != nil {
			panic(err)
		}
	}
	// Output:
	// + create queue jobs
	// Plan: 1 to create, 0 to update, 0 to replace, 0 to delete.
	// No changes: the namespace matches the file.
}
