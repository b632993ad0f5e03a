package store

// Inflate reads a stored document's bytes, for tests that look at raw items.
var Inflate = inflate
