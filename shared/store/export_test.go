package store

// InflateAttr reads the document an item holds in an attribute, for tests
// that look at raw items.
var InflateAttr = inflateAttr
