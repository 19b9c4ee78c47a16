package main

// .cvsm.yaml: which server, team and environment a folder uses, written by
// cvsm setup and read by get, export, run and whoami from the current folder
// upward (the first one found wins; the search stops at the filesystem's
// root). Its keys are server, team and environment, each optional; any
// other key is an error, so a typo does not pass silently. It holds no
// token.
//
// Where each setting comes from, first found wins:
//
//	token        --token-file, CVSM_TOKEN, the stored login for the server
//	server       --base-url, CVSM_BASE_URL, .cvsm.yaml, the latest login
//	team         --team, CVSM_TEAM, .cvsm.yaml, the stored login's team
//	environment  -e/--environment, CVSM_ENVIRONMENT, .cvsm.yaml, production

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/cvsm/cvsm/clients/go/cvsm"
)

const projectFileName = ".cvsm.yaml"

var knownEnvironments = []string{"production", "staging", "development"}

// projectConfig is one .cvsm.yaml.
type projectConfig struct {
	Server      string `yaml:"server,omitempty"`
	Team        string `yaml:"team,omitempty"`
	Environment string `yaml:"environment,omitempty"`
}

// findProject is the first .cvsm.yaml from dir upward, and its path ("" for
// none).
func findProject(dir string) (projectConfig, string, error) {
	for {
		path := filepath.Join(dir, projectFileName)
		raw, err := os.ReadFile(path)
		switch {
		case err == nil:
			cfg, err := parseProject(raw)
			if err != nil {
				return projectConfig{}, path, configErrorf("%s: %v", path, err)
			}
			return cfg, path, nil
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission):
			var perr *os.PathError
			if !errors.As(err, &perr) || !isNotDir(perr) {
				return projectConfig{}, path, configErrorf("cannot read %s: %v", path, pathError(err))
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return projectConfig{}, "", nil
		}
		dir = parent
	}
}

// isNotDir is a path error that only says a folder of the path is a file.
func isNotDir(perr *os.PathError) bool {
	return strings.Contains(perr.Err.Error(), "not a directory")
}

// parseProject reads a .cvsm.yaml: a mapping of the three keys, each a
// string (an empty file is no setting).
func parseProject(raw []byte) (projectConfig, error) {
	var cfg projectConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return projectConfig{}, fmt.Errorf("not a valid %s (keys server, team, environment): %s", projectFileName, oneLine(err.Error()))
	}
	cfg.Server = strings.TrimSpace(cfg.Server)
	cfg.Team = strings.TrimSpace(cfg.Team)
	cfg.Environment = strings.TrimSpace(cfg.Environment)
	if cfg.Server != "" {
		if _, err := serverKey(cfg.Server); err != nil {
			return projectConfig{}, fmt.Errorf("server %q is not an absolute http or https address", cfg.Server)
		}
	}
	return cfg, nil
}

// loadProject finds the folder's .cvsm.yaml once per run.
func (c *cli) loadProject() error {
	if c.projectLoaded {
		return c.projectErr
	}
	c.projectLoaded = true
	dir, err := os.Getwd()
	if err != nil {
		return nil // no current folder: no project file
	}
	c.projectCfg, c.projectPath, c.projectErr = findProject(dir)
	return c.projectErr
}

// project is the folder's .cvsm.yaml and its path ("" when there is none or
// it cannot be read).
func (c *cli) project() (projectConfig, string) {
	if err := c.loadProject(); err != nil {
		return projectConfig{}, ""
	}
	return c.projectCfg, c.projectPath
}

// configuredServer is the server the flags, CVSM_BASE_URL or .cvsm.yaml
// name ("" when none does).
func (c *cli) configuredServer() string {
	if c.settings.baseURL.set {
		return c.settings.baseURL.value
	}
	if env := strings.TrimSpace(os.Getenv(cvsm.EnvBaseURL)); env != "" {
		return env
	}
	project, _ := c.project()
	return project.Server
}

// --- setup -------------------------------------------------------------------

func (c *cli) setup(args []string) error {
	fs := c.newFlagSet("setup")
	var serverFlag stringFlag
	fs.Var(&serverFlag, "server", "")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return c.flagError("setup", err)
	}
	if len(rest) > 0 {
		return usagef("setup", "setup takes no arguments, got %q", rest[0])
	}
	creds, _, err := loadCredentials()
	if err != nil {
		return err
	}
	raw := serverFlag.value
	if raw == "" {
		raw = c.configuredServer()
	}
	if raw == "" {
		raw = creds.Default
	}
	if raw == "" {
		return usagef("setup", "which server? pass --server URL, or run 'cvsm login --server URL' first")
	}
	server, err := serverKey(raw)
	if err != nil {
		return err
	}
	cfg := projectConfig{Server: server}
	cfg.Team = c.settings.team.value
	if cfg.Team == "" {
		if cred := creds.Servers[server]; cred != nil {
			cfg.Team = cred.Team
		}
	}
	if cfg.Team == "" {
		return usagef("setup", "which team? pass --team TEAM (its slug), or run 'cvsm login' first")
	}
	cfg.Environment = c.settings.environment.value
	if cfg.Environment == "" {
		cfg.Environment = "production"
	}
	known := false
	for _, env := range knownEnvironments {
		known = known || env == cfg.Environment
	}
	if !known {
		return usagef("setup", "unknown environment %q: use %s", cfg.Environment, strings.Join(knownEnvironments, ", "))
	}
	raw2, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	content := "# cvsm settings of this folder and the folders below it (cvsm setup).\n" +
		"# No token here: the token comes from 'cvsm login', CVSM_TOKEN or --token-file.\n" + string(raw2)
	dir, err := os.Getwd()
	if err != nil {
		return configErrorf("no current folder: %v", err)
	}
	path := filepath.Join(dir, projectFileName)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return configErrorf("cannot write %s: %v", path, pathError(err))
	}
	fmt.Fprintf(c.stdout, "Wrote %s: server %s, team %s, environment %s.\n", path, cfg.Server, cfg.Team, cfg.Environment)
	if creds.Servers[server] == nil {
		fmt.Fprintf(c.stdout, "Not signed in to %s yet: run 'cvsm login'.\n", server)
	}
	return nil
}
