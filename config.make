# Appends the cargo step to nginx's Makefile (see `config`).

cat << END                                            >> $NGX_MAKEFILE

# pow-shield: cargo is incremental, so always ask it.
.PHONY: $ngx_pow_shield_lib

$ngx_pow_shield_lib:
	cd "$ngx_addon_dir" && \\
	NGINX_BUILD_DIR="\$(CURDIR)/$NGX_OBJS" \\
	\$(NGX_CARGO) rustc --release --lib --crate-type staticlib \\
		--no-default-features --target-dir "\$(CURDIR)/$NGX_OBJS/addon/pow-shield"

$NGX_OBJS/ngx_http_pow_shield_module$ngx_modext: $ngx_pow_shield_lib

END

if ! grep -q '^NGX_CARGO' $NGX_MAKEFILE; then
    sed -i.bak -e "1a NGX_CARGO = ${NGX_CARGO:-cargo}" $NGX_MAKEFILE && rm -f $NGX_MAKEFILE.bak
fi
