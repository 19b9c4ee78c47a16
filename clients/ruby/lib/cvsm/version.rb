# frozen_string_literal: true

# Version and user agent of the cvsm Ruby SDK.
module Cvsm
  # Cvsm::VERSION is the released version of this gem.
  VERSION = "0.1.0"

  # Cvsm::USER_AGENT is the User-Agent header sent with every request.
  USER_AGENT = "cvsm-ruby/#{VERSION}"
end
