package e2e

import (
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The CPU a cell's phases use. On this two-core machine the emulator, the consumers and, in the
// Postgres cell, the database server share the cores, so a phase that needs more CPU takes
// longer even when it waits for nothing: these metrics tell that apart from a wait.

// cpuSample is what one phase of a cell used: the CPU of this process (the emulator, the
// consumer and its client) and of the database server's processes that serve the cell.
type cpuSample struct {
	proc, db time.Duration
}

// cpuMeter reads the CPU of this process and, given a pool whose server runs on this machine,
// of the server's processes serving the pool's database (its backends and the WAL writer,
// which together do a commit's work).
type cpuMeter struct {
	pool *pgxpool.Pool
}

// phase runs fn and returns the CPU it used. db is 0 without a pool, or when the server's
// processes cannot be read (another machine, a container).
func (c cpuMeter) phase(fn func()) cpuSample {
	proc0 := processCPU()
	db0 := c.serverTicks()
	fn()
	s := cpuSample{proc: processCPU() - proc0}
	for pid, t := range c.serverTicks() {
		s.db += time.Duration(t-db0[pid]) * tick // a process started meanwhile counts from 0
	}
	return s
}

// tick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on Linux).
const tick = 10 * time.Millisecond

// serverTicks is the CPU time, in ticks, of each server process serving the pool's database
// and of the WAL writer, by process id; nil when there is no pool or they cannot be read.
func (c cpuMeter) serverTicks() map[int]int64 {
	if c.pool == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() OR backend_type = 'walwriter'`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	out := map[int]int64{}
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			return nil
		}
		t, ok := procTicks(pid)
		if !ok {
			return nil
		}
		out[pid] = t
	}
	if rows.Err() != nil {
		return nil
	}
	return out
}

// procTicks is the user and system CPU time, in ticks, of process pid, from /proc/<pid>/stat.
func procTicks(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return utime + stime, true
}
