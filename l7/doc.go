// Package l7 decides HTTP requests against the http rules of a
// CiliumNetworkPolicy (toPorts[].rules.http), with Cilium's semantics:
// method, path and host are RE2 regexps that must match the whole string
// (an empty one matches anything); path is the request-target as sent,
// query string included; header names are case-insensitive and header
// values exact. The fields of one rule are ANDed, the rules are ORed, and
// an empty rule matches every request.
//
// A Matcher does not scan its rules one by one. Compile sorts each rule by
// the literal strings its method, path and host can be: a regexp whose
// language is a small finite set of strings (`/public`, `GET`, `/a\.b`,
// `GET|HEAD`, `^/x$`) is indexed by those strings, in one map keyed by
// (method, path, host) where a field that is empty or not such a set is a
// wildcard. Allows does one map lookup per wildcard pattern present among
// the rules (at most 8), so literal rules cost the same however many there
// are. In each map entry the rules left over are put in groups that share
// everything but one regexp (the path's, else the host's, else the
// method's); rules whose path is such a regexp are indexed by the path's
// literal prefix (`/api/` for `/api/.*`), one map lookup per distinct
// prefix length, so a request only runs the groups whose prefix its path
// starts with. The regexps of a group are joined into one alternation,
// with common leading subexpressions taken out (and common literal
// prefixes by Go's parser), so that it works as a trie.
//
// The limits, honestly: a request costs one regexp run per group it
// reaches, and rules share a group only if they agree on everything else.
// Many rules that differ in more than one regexp field, or in their
// headers (say ten thousand rules on one path, each wanting its own
// X-Tenant value), are checked one group at a time: linear in their
// number. A joined alternation is run by Go's NFA (no DFA): its cost per
// byte grows with the number of branches alive at once, which for
// regexps without a literal prefix that share their start (`(/v1)?/x<i>`
// for i < 10000) is the fan-out of the factored trie, not the number of
// rules: 2.5x to 4.5x one rule's cost at ten thousand (BenchmarkMatch
// noprefix); for regexps that share nothing (`.*\.php|.*/admin`) all
// branches stay alive and the cost is linear.
//
// The package must never panic on bad input nor accept a rule it cannot
// decide exactly: Compile rejects what Check rejects.
package l7
