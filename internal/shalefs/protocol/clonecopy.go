package protocol

import "strings"

// StoreLocation is where a database's directory lives, as a clone's
// bootstrap compares the clone's and its parent's (RFC 0010 step 20).
type StoreLocation struct {
	Scheme   string // "file" or "s3"
	Bucket   string // s3: the bucket (informative: buckets of one endpoint share)
	Endpoint string // s3: the endpoint it is reached at
	// OwnCredentials: the store is read with the clone's own credentials
	// (false: the parent's were given, --clone-credentials-dir).
	OwnCredentials bool
}

// CloneCopies decides whether a clone copies its parent's tables (step
// 20) or shares them (steps 16-17), and says why. It shares only when
// every FileSystem of the clone can read the parent's objects for as long
// as the clone needs them with the clone's own store settings: the same
// scheme, and for S3 the same endpoint and the clone's own credentials
// (another bucket of that endpoint is read with them, as before step 20).
// Asked (--clone-copy; the operator, for a parent in another ObjectStore,
// whose bucket may go with its ObjectStore) always copies.
func CloneCopies(clone, parent StoreLocation, asked bool) (bool, string) {
	norm := func(e string) string { return strings.ToLower(strings.TrimSuffix(e, "/")) }
	switch {
	case asked:
		return true, "asked to copy (--clone-copy, or the operator for another ObjectStore)"
	case clone.Scheme != parent.Scheme:
		return true, "the parent is on " + parent.Scheme + "://, the clone on " + clone.Scheme + "://"
	case clone.Scheme != "s3":
		return false, "same file system"
	case norm(clone.Endpoint) != norm(parent.Endpoint):
		return true, "the parent is on endpoint " + parent.Endpoint + ", the clone on " + clone.Endpoint
	case !parent.OwnCredentials:
		return true, "the parent is read with other credentials than the clone's"
	}
	return false, "same endpoint, bucket and credentials"
}
