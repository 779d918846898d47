package shalefs

// The rocksshim.FileSystemHooks the C++ FileSystem calls: they pass the
// activity as its label and the FS works with the typed Activity.

// Fetch materializes a managed file in the local cache (fetch).
func (f *core) Fetch(name, activity string) error { return f.fetch(name, activityOf(activity)) }

// OpenTable prepares reading a table (openTable).
func (f *core) OpenTable(name, activity string) error { return f.openTable(name, activityOf(activity)) }

// ReadAt implements rocksshim.FileSystemHooks: a ranged read of a table.
func (f *core) ReadAt(name string, off int64, buf []byte, activity string) (int, error) {
	got, err := f.multiRead(name, []int64{off}, [][]byte{buf}, activityOf(activity))
	if err != nil {
		return 0, err
	}
	return got[0], nil
}

// MultiReadAt implements rocksshim.MultiReadHooks (multiRead).
func (f *core) MultiReadAt(name string, offs []int64, bufs [][]byte, activity string) ([]int, error) {
	return f.multiRead(name, offs, bufs, activityOf(activity))
}
