-- One Redis: the check's reply as it is.
return reply
