package operator

import (
	"errors"

	"github.com/shale-rocks/shale/internal/objstore"
)

func isNotFound(err error) bool { return errors.Is(err, objstore.ErrNotFound) }
