package main

import (
	"io/fs"
	"testing"
)

func TestResolveConfig(t *testing.T) {
	files := map[string]string{
		"/var/lib/hearth/operator.token": "hearth_fromfile\n",
		"/srv/hearth/operator.token":     "  hearth_custom  \n",
		"/empty/operator.token":          "\n",
	}
	readFile := func(path string) ([]byte, error) {
		if s, ok := files[path]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	tests := []struct {
		name      string
		flagURL   string
		flagToken string
		env       map[string]string
		want      config
	}{
		{
			name: "nothing set: local daemon and its token file",
			want: config{URL: defaultURL, Token: "hearth_fromfile", TokenSource: "/var/lib/hearth/operator.token"},
		},
		{
			name: "HEARTH_DATA_DIR moves the token file",
			env:  map[string]string{"HEARTH_DATA_DIR": "/srv/hearth"},
			want: config{URL: defaultURL, Token: "hearth_custom", TokenSource: "/srv/hearth/operator.token"},
		},
		{
			name: "unreadable token file: no token",
			env:  map[string]string{"HEARTH_DATA_DIR": "/nowhere"},
			want: config{URL: defaultURL},
		},
		{
			name: "empty token file: no token",
			env:  map[string]string{"HEARTH_DATA_DIR": "/empty"},
			want: config{URL: defaultURL},
		},
		{
			name: "environment",
			env:  map[string]string{"HEARTH_URL": "https://h.example:8443/", "HEARTH_TOKEN": "hearth_env"},
			want: config{URL: "https://h.example:8443/", Token: "hearth_env", TokenSource: "HEARTH_TOKEN"},
		},
		{
			name:    "flags beat environment",
			flagURL: "http://10.0.0.1:7077", flagToken: "hearth_flag",
			env:  map[string]string{"HEARTH_URL": "https://h.example", "HEARTH_TOKEN": "hearth_env"},
			want: config{URL: "http://10.0.0.1:7077", Token: "hearth_flag", TokenSource: "--token"},
		},
		{
			name: "token without URL: local daemon, given token",
			env:  map[string]string{"HEARTH_TOKEN": "hearth_env"},
			want: config{URL: defaultURL, Token: "hearth_env", TokenSource: "HEARTH_TOKEN"},
		},
		{
			name: "URL without token: the local token file is not sent elsewhere",
			env:  map[string]string{"HEARTH_URL": "https://h.example"},
			want: config{URL: "https://h.example"},
		},
		{
			name:    "URL flag without token: likewise",
			flagURL: "http://127.0.0.1:9999",
			want:    config{URL: "http://127.0.0.1:9999"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolveConfig(tt.flagURL, tt.flagToken, func(k string) string { return tt.env[k] }, readFile)
			if got != tt.want {
				t.Errorf("resolveConfig() = %+v, want %+v", got, tt.want)
			}
		})
	}
}
