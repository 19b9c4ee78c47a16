# frozen_string_literal: true

require_relative "lib/cvsm/version"

Gem::Specification.new do |spec|
  spec.name = "cvsm"
  spec.version = Cvsm::VERSION
  spec.summary = "Ruby client for the cvsm team secrets manager"
  spec.description = "Reads secrets from a cvsm server: get, get_all and inject into ENV, " \
                     "with a short-lived cache, retries and typed errors. Standard library only."
  spec.authors = ["cvsm contributors"]
  spec.license = "MIT"
  spec.homepage = "https://github.com/cvsm/cvsm/tree/main/clients/ruby"
  spec.required_ruby_version = ">= 3.1"
  # Paths are relative to this directory, which `gem build` must run in (see README.md).
  spec.files = Dir.glob("lib/**/*.rb", base: __dir__).sort + ["LICENSE", "README.md", "cvsm.gemspec"]
  spec.require_paths = ["lib"]
  spec.metadata["rubygems_mfa_required"] = "true"
  spec.metadata["homepage_uri"] = spec.homepage
  spec.metadata["source_code_uri"] = "https://github.com/cvsm/cvsm/tree/main/clients/ruby"
  spec.metadata["changelog_uri"] = "https://github.com/cvsm/cvsm/blob/main/clients/CHANGELOG.md"
  spec.metadata["bug_tracker_uri"] = "https://github.com/cvsm/cvsm/issues"
end
