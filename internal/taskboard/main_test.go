package taskboard

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/swarmd/swarmd/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(pgtest.Share())) }
