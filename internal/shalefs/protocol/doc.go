// Package protocol holds the pure decisions of Shale's storage protocols
// (docs/fencing.md): what an owner, a reader or the trash loop may do,
// decided from what they read in the store and from a clock reading passed
// in. Nothing here does I/O or reads a clock, and the package depends only
// on package layout, so every rule is a function with a table test, and
// the log-protocol model (logmodel_test.go, docs/rfcs/0001-log-protocol-
// model.md) explores the same functions the storage layer calls. The I/O
// around them is package shalefs' (takeover.go, fs.go, reader.go, tier.go,
// compaction.go, readerlease.go).
//
// Durations are readings of the caller's clock (shalefs/clock.go): an
// owner's own leases on its lease reading, which never runs slower than
// real time, and its waits for others on its wait reading, which never
// runs faster. A rule is only as safe as the reading it is given.
//
// # Epochs and fencing
//
// An owner claims an epoch with a create-only object. It takes the next
// epoch above every claim in the store, or the one it was asked for if
// that is above them all; an epoch not above the highest is refused, with
// both named (ChooseEpoch). An owner is deposed as soon as any claim above
// its own exists, and the highest such claim names its successor
// (HigherEpoch).
//
// An owner serves a read without asking the store only while its last
// confirmation of ownership began less than its read lease ago
// (LeaseFresh); the lease counts from the start of the confirmation, so a
// slow confirmation proves nothing about now.
//
// An owner acknowledges a synced write only once the segment holding it
// is stored, and first confirms its ownership when the segment is the
// first of a new log (no seal of a successor can protect a log created
// after the successor listed the store) or when its last confirmation is
// AckFresh old or older (the seal that would have stopped the segment may
// have been deleted with its log) (ConfirmBeforeAck).
//
// A new owner serves nothing until every earlier owner that may still
// serve reads has run out of its lease: counted from its claim, it waits
// the longest lease plus margin among its own and theirs (a shorter lease
// rolled out must still outwait the old one); with no earlier owner, or
// after a clean release, it does not wait (LeaseWait).
//
// # Logs
//
// A log version (one epoch's WAL or MANIFEST) is read from slot 1 up:
// the longest fold starting at a slot, else the segment there, until the
// first valid seal (an empty segment) or a missing slot. A seal in a slot
// a fold of the same version covers is void: the writer used that slot
// and the fold freed it before the seal landed. Data before the seal that
// the log does not reach is a hole, and a takeover refuses to open on it
// (BuildLogVersion, LogVersion.Contiguous). A version without segment 1
// was deleted (the trash loop deletes segment 1 first; folding never
// does), whatever a late retry put back (LogVersion.HeadDeleted).
//
// A sealer is done only when the log reaches its first valid seal: empty
// slots between the log's end and that seal are slots the writer may
// still fill, and the sealer takes them in order (LogVersion.SealGap).
// A writer with WAL pipeline depth D > 1 (its epoch claim) keeps D uploads
// in flight that land in any order and clears them in slot order, so a
// hole followed by data is its window: SealGap(D) takes the slots from the
// log's end up to the seal in order too, and the log ends at the first one
// won. After sealing, data D or more slots past the seal of a log with
// segment 1 means the store lost data (LogVersion.LostData; RFC 0013).
//
// Of several versions of one log name, the highest epoch's with data is
// the log: only an owner that did not see a log can create another of the
// same name, and it took its epoch after that log's writer was fenced
// (ChooseLogVersion). A version of an epoch older than the last completed
// takeover counts only if that takeover's opened record kept it; any
// other was created by an owner the takeover had already deposed, was
// never acknowledged, and is never replayed (AdmitLogVersion).
//
// # Tiers
//
// A database with a cold tier records it once in the hot store (an id and
// the location), and the cold location carries a marker with the same
// id. An opener without a cold store is refused when the database records
// one; a cold location holding another database's marker, or objects that
// are not a Shale cold tier, is refused; a marker missing after the tier
// was paired means the tier moved or was emptied, and is refused. Owners
// create what is missing (the record, then the marker); readers write
// nothing, and a reader given a cold store before the database records
// one leaves it unused until it does (DecideTiers).
//
// # Remote compaction
//
// An owner deletes the job directory of an older owner's job (neither it
// nor the deposed submitter can install it), and of its own job once it is
// neither running nor being installed; never a newer owner's job (this
// owner is then deposed), and never a directory whose name is not a job's
// (SweepJob).
//
// # Trash and reader leases
//
// A deleted file is only marked (a trash marker) and stays in the store
// for the delete grace, counted from when this owner first saw the
// marker; then a pass takes it up (TrashDue). A log's data goes first; its
// seals stay until 3×AckFresh of the owner that wrote it after the marker,
// never less than the grace, and forever when its claim does not say
// (SealsAfter, SealsDue): a writer that lost its seal could otherwise
// store a segment in the freed slot and acknowledge it. No version a live
// reader lease names is deleted, and a lease is live while it changed less
// than its TTL ago as the owner saw it, so no clocks are compared across
// machines (LeaseProtects). A reader serves reads only while it renewed
// its lease within its TTL (ReaderLeaseFresh), and renews it whenever the
// files of its view change and at least every third of its TTL
// (RenewReaderLease).
//
// Every pass of the trash loop confirms ownership first and stops once its
// confirmation is older than a lease, so a deposed owner deletes nothing
// its successor uses; that part is I/O, in shalefs/takeover.go.
package protocol
