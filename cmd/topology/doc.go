// Command topology provisions Service Bus entities from a declarative YAML file: the
// queues, topics, subscriptions and rules it declares, and the forwarding layout of its
// sequenced blocks (see package topology).
//
//	topology validate FILE            check the file; no broker is contacted
//	topology plan FILE                print what apply would change
//	topology apply [--prune] FILE     make the namespace match the file
//	topology render FILE              print the equivalent Azure CLI script
//
// plan and apply reach the namespace through --connection-string (or
// SEQBUS_CONNECTION_STRING; UseDevelopmentEmulator=true selects the seqbus emulator) or
// --namespace (or SEQBUS_NAMESPACE, authenticated by azidentity.DefaultAzureCredential).
//
// The command is thin: it parses flags, loads the file with package topology, connects
// with topology/sbadmin and prints. It must never import the emulator (tests may).
package main
