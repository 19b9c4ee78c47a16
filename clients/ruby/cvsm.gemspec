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
  spec.required_ruby_version = ">= 3.1"
  # Paths are relative to this directory, which `gem build` must run in (see README.md).
  spec.files = Dir.glob("lib/**/*.rb", base: __dir__).sort + ["README.md", "cvsm.gemspec"]
  spec.require_paths = ["lib"]
  spec.metadata["rubygems_mfa_required"] = "true"
end
