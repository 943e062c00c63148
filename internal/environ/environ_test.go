package environ

import (
	"slices"
	"testing"
)

func TestBuild(t *testing.T) {
	cases := []struct {
		name   string
		dir    string
		layers [][]string
		want   []string
	}{
		{"later layers win in place", "", [][]string{{"A=1", "B=2", "junk", "=x"}, {"B=3", "C=4"}, {"A=5"}},
			[]string{"A=5", "B=3", "C=4"}},
		{"dir before the daemon's PATH", "/opt/swarmd", [][]string{{"PATH=/usr/bin:/bin", "HOME=/h"}},
			[]string{"PATH=/opt/swarmd:/usr/bin:/bin", "HOME=/h"}},
		{"a configured PATH is the effective one", "/opt/swarmd",
			[][]string{{"PATH=/usr/bin"}, {"PATH=/backend/bin"}, {"PATH=/agent/bin:/usr/bin"}},
			[]string{"PATH=/opt/swarmd:/agent/bin:/usr/bin"}},
		{"no PATH anywhere", "/opt/swarmd", [][]string{{"A=1"}}, []string{"A=1", "PATH=/opt/swarmd"}},
		{"dir already first", "/opt/swarmd", [][]string{{"PATH=/opt/swarmd:/bin"}}, []string{"PATH=/opt/swarmd:/bin"}},
		{"empty PATH", "/opt/swarmd", [][]string{{"PATH="}}, []string{"PATH=/opt/swarmd"}},
		{"a longer dir with the same prefix is not ours", "/opt/s", [][]string{{"PATH=/opt/swarmd"}},
			[]string{"PATH=/opt/s:/opt/swarmd"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before [][]string
			for _, l := range c.layers {
				before = append(before, slices.Clone(l))
			}
			got := Build(c.dir, c.layers...)
			if !slices.Equal(got, c.want) {
				t.Errorf("Build = %q, want %q", got, c.want)
			}
			for i := range c.layers {
				if !slices.Equal(c.layers[i], before[i]) {
					t.Errorf("layer %d modified: %q", i, c.layers[i])
				}
			}
		})
	}
}

// The git identity is a layer like any other: what is configured over it
// wins key by key, and it wins over the daemon's own environment.
func TestGitIdentity(t *testing.T) {
	got := Build("", []string{"GIT_AUTHOR_NAME=root", "HOME=/root"}, GitIdentity("alice", "example.com"),
		[]string{"GIT_COMMITTER_EMAIL=ci@example.com"})
	want := []string{"GIT_AUTHOR_NAME=alice (swarmd)", "HOME=/root", "GIT_AUTHOR_EMAIL=alice@example.com",
		"GIT_COMMITTER_NAME=alice (swarmd)", "GIT_COMMITTER_EMAIL=ci@example.com"}
	if !slices.Equal(got, want) {
		t.Errorf("Build = %q, want %q", got, want)
	}
}
