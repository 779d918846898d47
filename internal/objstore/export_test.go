package objstore

// OpenS3Legacy opens a store that uploads as Shale did before checksums
// (issue 29): no checksum, an MD5 with every part. Benchmarks compare with
// it.
func OpenS3Legacy(rawURL string, cfg S3Config) (*S3Store, error) {
	cfg.Checksum = ChecksumNone
	s, err := OpenS3(rawURL, cfg)
	if err != nil {
		return nil, err
	}
	s.legacy = true
	return s, nil
}
