// Package names holds the rule for the names of budgets and breakers, which
// become part of store keys.
package names

import "fmt"

// MaxLen bounds a name, in bytes.
const MaxLen = 128

// Check returns what is wrong with name as a budget or breaker name, or ""
// if nothing is: 1 to MaxLen bytes of valid UTF-8 made of letters, digits
// and the characters '-', '_', '.' and ':'. It rejects everything else, in
// particular the separator '#' that stores use in keys, so that two names
// can never map to the same item. The answer reads after the name, as in
// "name " + Check(name).
func Check(name string) string {
	if name == "" {
		return "is empty"
	}
	if len(name) > MaxLen {
		return fmt.Sprintf("is %d bytes long; at most %d allowed", len(name), MaxLen)
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '-', r == '_', r == '.', r == ':':
		default:
			return fmt.Sprintf("%q has a character %q at byte %d; use letters, digits, '-', '_', '.' or ':'", name, r, i)
		}
	}
	return ""
}

// Validate returns an error describing what is wrong with name, or nil.
func Validate(name string) error {
	if msg := Check(name); msg != "" {
		return fmt.Errorf("herdguard: name %s", msg)
	}
	return nil
}
