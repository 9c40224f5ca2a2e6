// Package plural writes counts of things in English: "1 policy",
// "2 policies", "0 namespaces". It is pure string logic for messages.
package plural

import (
	"strconv"
	"strings"
)

// N is n followed by noun, in the plural unless n is 1.
func N(n int, noun string) string { return strconv.Itoa(n) + " " + Noun(n, noun) }

// Noun is noun in the plural unless n is 1 ("2 of 3 " + Noun(3, "cell")).
// The plural is English's regular one: -y after a consonant becomes
// -ies, -s, -x, -ch and -sh take -es, everything else -s.
func Noun(n int, noun string) string {
	if n == 1 || noun == "" {
		return noun
	}
	last := noun[len(noun)-1]
	switch {
	case last == 'y' && len(noun) > 1 && !strings.ContainsRune("aeiou", rune(noun[len(noun)-2])):
		return noun[:len(noun)-1] + "ies"
	case last == 's' || last == 'x' || strings.HasSuffix(noun, "ch") || strings.HasSuffix(noun, "sh"):
		return noun + "es"
	}
	return noun + "s"
}
