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
  spec.files = Dir["lib/**/*.rb"] + ["README.md", "cvsm.gemspec"]
  spec.require_paths = ["lib"]
  spec.metadata["rubygems_mfa_required"] = "true"
end
