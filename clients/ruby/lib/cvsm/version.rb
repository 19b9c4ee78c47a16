# frozen_string_literal: true

# Version and user agent of the cvsm Ruby SDK.
module Cvsm
  # The released version of this gem.
  VERSION = "0.1.0"

  # The User-Agent header sent with every request.
  USER_AGENT = "cvsm-ruby/#{VERSION}"
end
