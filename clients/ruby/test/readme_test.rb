# frozen_string_literal: true

require "open3"
require "rbconfig"
require_relative "test_helper"

# The README's first example runs as printed, its install line works from a clone, and the
# version is written in one place only.
class ReadmeTest < CvsmTest
  ROOT = File.expand_path("..", __dir__)
  README = File.read(File.join(ROOT, "README.md"))

  # The body of the first fenced block of +language+ after +heading+ (or in the whole file).
  def fenced(language, after: nil)
    text = after ? README[README.index(after)..] : README
    text[/^```#{language}\n(.*?)^```$/m, 1] or flunk("no #{language} block#{" after #{after}" if after}")
  end

  def clean_env
    ENV.to_h.reject { |name, _| name.start_with?("CVSM_") || name.match?(/\A(API_KEY|DATABASE_URL)\z/) }
  end

  def test_the_first_example_runs_exactly_as_printed
    stub = stub_api("DATABASE_URL" => "postgres://db", "API_KEY" => "k-123")
    env = clean_env.merge("CVSM_TOKEN" => TOKEN, "CVSM_BASE_URL" => StubApi.shared.base_url, "CVSM_TEAM" => "acme")
    script = fenced("ruby")
    out, err, status = Open3.capture3(env, RbConfig.ruby, "-I", File.join(ROOT, "lib"), "-e", script,
                                      unsetenv_others: true)
    assert status.success?, err
    assert_equal "loaded API_KEY, DATABASE_URL\n", out
    assert_equal ["/teams/acme/secrets/by-name/DATABASE_URL", "/teams/acme/secrets/export"], stub.paths
  end

  def test_the_install_line_builds_and_installs_the_gem_from_a_clone_into_an_empty_folder
    line = fenced("sh", after: "## Installation").strip
    Dir.mktmpdir do |dir|
      # The README's layout: the clone at ../cvsm next to the project, an empty folder.
      FileUtils.mkdir_p(File.join(dir, "cvsm", "clients"))
      FileUtils.cp_r(ROOT, File.join(dir, "cvsm", "clients", "ruby"))
      app = File.join(dir, "app")
      Dir.mkdir(app)
      gem_home = File.join(dir, "gems")
      env = { "GEM_HOME" => gem_home, "GEM_PATH" => gem_home, "HOME" => dir }
      out, status = Open3.capture2e(env, "sh", "-ec", line, chdir: app)
      assert status.success?, out
      version, status = Open3.capture2e(env, RbConfig.ruby, "-e", 'require "cvsm"; print Cvsm::VERSION', chdir: app)
      assert status.success?, version
      assert_equal Cvsm::VERSION, version
    end
  end

  def test_the_version_is_written_in_version_rb_only
    assert_match(/\A\d+\.\d+\.\d+\z/, Cvsm::VERSION)
    assert_equal "cvsm-ruby/#{Cvsm::VERSION}", Cvsm::USER_AGENT
    spec = Dir.chdir(ROOT) { Gem::Specification.load("cvsm.gemspec") }
    assert_equal Cvsm::VERSION, spec.version.to_s
    files = Dir.glob("**/*", base: ROOT).reject do |path|
      path.end_with?(".gem") || File.directory?(File.join(ROOT, path))
    end
    holders = files.select { |path| File.read(File.join(ROOT, path)).include?(Cvsm::VERSION) }
    assert_equal ["lib/cvsm/version.rb"], holders
  end
end
