# frozen_string_literal: true

require_relative "rules"

# Version and user agent of the cvsm Ruby SDK.
module Cvsm
  # The released version of this gem.
  VERSION = "0.1.0"

  # The User-Agent header sent with every request.
  USER_AGENT = "#{Rules::USER_AGENT_PREFIX}ruby/#{VERSION}"
end
